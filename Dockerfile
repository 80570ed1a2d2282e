# syntax=docker/dockerfile:1
# todo-agent: build the wheel in one stage; install it, and nothing else, slim and unprivileged.

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY backend ./backend
RUN pip wheel --no-deps --wheel-dir /dist . \
    && python -m venv /venv \
    && /venv/bin/pip install --constraint constraints.txt /dist/*.whl

FROM python:3.11-slim
ENV PATH=/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ENVIRONMENT=production
RUN useradd --system --uid 10001 --no-create-home app
# The installed wheel carries its migrations: no source tree, no PYTHONPATH.
COPY --from=build /venv /venv
WORKDIR /tmp
USER app
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
# `serve` applies the migrations (safe with several replicas) and then starts uvicorn.
CMD ["todo-agent", "serve", "--host", "0.0.0.0", "--port", "8000"]

# syntax=docker/dockerfile:1
# todo-agent: build the virtualenv in one stage, run it slim and unprivileged in the next.

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
RUN python -m venv /venv
COPY pyproject.toml constraints.txt README.md ./
COPY backend ./backend
RUN /venv/bin/pip install --constraint constraints.txt .

FROM python:3.11-slim
ENV PATH=/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ENVIRONMENT=production
RUN useradd --system --uid 10001 --no-create-home app
COPY --from=build /venv /venv
WORKDIR /app
# The source next to its migrations: `todo-agent migrate` finds alembic.ini beside backend/.
COPY --chown=root:root alembic.ini ./
COPY --chown=root:root alembic ./alembic
COPY --chown=root:root backend ./backend
USER app
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
# `serve` applies the migrations (safe with several replicas) and then starts uvicorn.
CMD ["todo-agent", "serve", "--host", "0.0.0.0", "--port", "8000"]

"""Regenerate schema.d.ts from the service's OpenAPI document: `make client`.

The document comes from the application itself (`create_app().openapi()`, no server or
database needed); openapi-typescript (pinned in package.json) turns it into types.
`--out PATH` writes elsewhere (the test compares a fresh generation with the committed file).
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from backend.main import create_app  # noqa: E402
from backend.settings import Settings  # noqa: E402


def openapi_document() -> dict[str, object]:
    return create_app(Settings(_env_file=None)).openapi()


def generate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        spec = Path(scratch) / "openapi.json"
        spec.write_text(json.dumps(openapi_document(), indent=2))
        # Fields with defaults stay optional: a request may leave them out.
        options = ["-o", str(out), "--default-non-nullable", "false"]
        node = shutil.which("node") or "node"
        subprocess.run(  # noqa: S603 (fixed arguments)
            [node, "node_modules/openapi-typescript/bin/cli.js", str(spec), *options],
            cwd=HERE,
            check=True,
            capture_output=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=HERE / "schema.d.ts")
    generate(parser.parse_args().out)

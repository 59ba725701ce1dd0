"""A stand-in for the `label-studio` command (tests of `hydranet engine label-studio` without installing Label Studio,
which takes minutes): `start ... -p PORT --user-token T` prints migration lines for FAKE_LS_DELAY_S seconds, then
answers GET /api/projects for "Token T" (401 otherwise); FAKE_LS_EXIT=N exits with N after the migrations instead.
It writes its argv and environment's LABEL_STUDIO_* keys to FAKE_LS_RECORD."""
from __future__ import annotations

import http.server
import json
import os
import sys
import time
from pathlib import Path


def write_fake(folder: Path) -> Path:
    """folder/label-studio: an executable running this file with this interpreter."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "label-studio"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    exe.chmod(0o755)
    return exe


def main(args: list[str]) -> int:
    port, token = int(args[args.index("-p") + 1]), args[args.index("--user-token") + 1]
    if os.environ.get("FAKE_LS_RECORD"):
        Path(os.environ["FAKE_LS_RECORD"]).write_text(json.dumps(
            {"argv": args, "env": {k: v for k, v in os.environ.items() if k.startswith(("LABEL_STUDIO", "LATEST"))}}))
    delay = float(os.environ.get("FAKE_LS_DELAY_S", "2"))
    steps = 4
    for k in range(steps):
        print(f"Applying migration {k + 1} of {steps}", flush=True)
        time.sleep(delay / steps)
    if os.environ.get("FAKE_LS_EXIT"):
        print("django.db.utils.OperationalError: database is locked", flush=True)
        return int(os.environ["FAKE_LS_EXIT"])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.headers.get("Authorization") == f"Token {token}" and self.path.startswith("/api/projects")
            body = json.dumps({"results": []} if ok else {"detail": "Authentication credentials were not provided."})
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a):
            pass

    print(f"Starting development server at http://127.0.0.1:{port}/", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

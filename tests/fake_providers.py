"""Stand-ins for the two outside providers of the claim flows (docs/claims.md).

``FakeHumanCheck``: a siteverify endpoint on loopback (``http.server`` in a thread) that
answers by token and records the form fields it received. ``signed_webhook`` and friends
build and sign payment events exactly as the payment provider does.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import orjson

from execution_proof.receipts.webhook_signature import signature_header

# Tokens the fake siteverify understands.
PASS = "token-pass"
FAIL = "token-fail"
ERROR_500 = "token-500"
NOT_JSON = "token-not-json"
NO_SUCCESS = "token-no-success"
SLOW = "token-slow"
SLOW_S = 2.0
HOLD = "token-hold"
"""Answers success only once the test sets ``release`` (``held`` is set when it arrives)."""
HOLD_LIMIT_S = 30.0


class FakeHumanCheck:
    """``POST /siteverify`` answering per ``response`` token; ``requests`` holds each form."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        self.held = threading.Event()
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                form = {name: values[0] for name, values in parse_qs(raw, keep_blank_values=True).items()}
                form["_content_type"] = self.headers.get("Content-Type") or ""
                form["_accept_encoding"] = self.headers.get("Accept-Encoding") or ""
                fake.requests.append(form)
                token = form.get("response", "")
                if token == ERROR_500:
                    self._answer(500, b'{"success": true}')
                elif token == NOT_JSON:
                    self._answer(200, b"<html>maintenance</html>", "text/html")
                elif token == NO_SUCCESS:
                    self._answer(200, b'{"ok": true}')
                elif token == FAIL:
                    self._answer(200, b'{"success": false, "error-codes": ["invalid-input-response", "Bad Code!"]}')
                elif token == HOLD:
                    fake.held.set()
                    fake.release.wait(HOLD_LIMIT_S)
                    self._answer(200, b'{"success": true}')
                elif token == SLOW:
                    time.sleep(SLOW_S)
                    self._answer(200, b'{"success": true}')
                elif token.startswith(PASS):
                    self._answer(200, b'{"success": true, "hostname": "localhost", "error-codes": []}')
                else:
                    self._answer(200, b'{"success": false, "error-codes": ["invalid-input-response"]}')

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/siteverify"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


# --- payment webhooks ------------------------------------------------------------------------

COMPLETED = "checkout.session.completed"


def checkout_event(
    session_id: str,
    *,
    plan: str | None = "basic",
    payment_status: str = "paid",
    event_id: str | None = None,
    event_type: str = COMPLETED,
    created: int = 1_795_000_000,
) -> dict[str, Any]:
    """An event body shaped like the provider's (docs/claims.md)."""
    metadata = {} if plan is None else {"plan": plan}
    return {
        "id": event_id or f"evt_{session_id}",
        "object": "event",
        "type": event_type,
        "created": created,
        "data": {
            "object": {
                "id": session_id,
                "object": "checkout.session",
                "created": created,
                "payment_status": payment_status,
                "metadata": metadata,
                "amount_total": 900,
            }
        },
    }


def signed_webhook(body: bytes, secrets: list[str], timestamp: int) -> dict[str, str]:
    """Headers as the provider sends them: JSON, and one ``v1`` per secret."""
    return {
        "Content-Type": "application/json; charset=utf-8",
        "Payment-Signature": signature_header(secrets, timestamp, body),
    }


def event_bytes(event: dict[str, Any]) -> bytes:
    return orjson.dumps(event)

"""The fake server's Batch API: `/v1/files` (upload, metadata, content) and `/v1/batches` (create,
retrieve), answering each line of a batch with the same scripted responder as the chat endpoint.

A batch finishes `delay` seconds after it was created (checked when it is retrieved); knobs make the
next batches expire (`expire`: no answers, each line in the error file as `batch_expired`), fail lines
with a server error (`fail_lines`), or write lines that are not JSON (`garbage_lines`), as a provider
may. Lines are recorded in `lines`, not in the server's `requests` (those are synchronous calls).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_evalbench.testing.scripts import Reply, Responder, coerce

Render = Callable[[Reply, dict[str, Any], int], tuple[int, bytes, dict[str, str]]]


@dataclass
class BatchDesk:
    """The files and batches one fake server holds, and the knobs of its batch behaviour."""

    delay: float = 0.0
    """Seconds from a batch's creation until it is done."""
    expire: int = 0
    """The next this many batches expire unanswered."""
    fail_lines: int = 0
    """The next this many lines are answered HTTP 500 (in the error file)."""
    garbage_lines: int = 0
    """The next this many lines of an output file are not JSON."""
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Batch id -> the batch object; its input lines' custom ids under `_custom_ids`."""
    lines: list[dict[str, Any]] = field(default_factory=list)
    """Every line answered (its request body), in order."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _count: int = 0

    def _new_id(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}-fake-{self._count}"

    # -- routes -----------------------------------------------------------------------------------
    def post(self, path: str, raw: bytes, content_type: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if path == "/v1/files":
                return self._upload(raw, content_type)
            return self._create(raw)

    def get(self, path: str, answer: Responder, render: Render
            ) -> tuple[int, bytes]:
        with self._lock:
            parts = path.split("/")  # "", "v1", "batches"|"files", id[, "content"]
            if len(parts) == 4 and parts[2] == "batches" and parts[3] in self.batches:
                return 200, json.dumps(self._retrieve(parts[3], answer, render)).encode()
            if len(parts) == 5 and parts[2] == "files" and parts[4] == "content" and parts[3] in self.files:
                return 200, self.files[parts[3]]
            if len(parts) == 4 and parts[2] == "files" and parts[3] in self.files:
                return 200, json.dumps(self._file_object(parts[3], "batch")).encode()
            return 404, b""

    def _upload(self, raw: bytes, content_type: str) -> tuple[int, dict[str, Any]]:
        head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
        fields: dict[str, bytes] = {}
        for part in message.iter_parts() if message.is_multipart() else ():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                fields[name] = payload
        if fields.get("purpose") != b"batch" or "file" not in fields:
            return 400, {"error": {"message": "expected multipart fields purpose=batch and file", "type":
                                   "invalid_request_error", "param": None, "code": None}}
        file_id = self._new_id("file")
        self.files[file_id] = fields["file"]
        return 200, self._file_object(file_id, "batch")

    def _file_object(self, file_id: str, purpose: str) -> dict[str, Any]:
        return {"id": file_id, "object": "file", "bytes": len(self.files[file_id]), "created_at": int(time.time()),
                "filename": f"{file_id}.jsonl", "purpose": purpose, "status": "processed"}

    def _create(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        request = json.loads(raw or b"{}")
        input_id = request.get("input_file_id")
        if input_id not in self.files or request.get("endpoint") != "/v1/chat/completions":
            return 400, {"error": {"message": "unknown input_file_id or endpoint", "type": "invalid_request_error",
                                   "param": None, "code": None}}
        batch_id = self._new_id("batch")
        now = time.time()
        custom_ids = [json.loads(line)["custom_id"] for line in self.files[input_id].splitlines() if line.strip()]
        batch = {"id": batch_id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
                 "input_file_id": input_id, "completion_window": request.get("completion_window", "24h"),
                 "status": "in_progress", "output_file_id": None, "error_file_id": None, "created_at": int(now),
                 "in_progress_at": int(now), "expires_at": int(now) + 86400, "completed_at": None,
                 "request_counts": {"total": len(custom_ids), "completed": 0, "failed": 0}, "metadata": None,
                 "_created": now, "_custom_ids": custom_ids}
        self.batches[batch_id] = batch
        return 200, _public(batch)

    def _retrieve(self, batch_id: str, answer: Responder, render: Render) -> dict[str, Any]:
        batch = self.batches[batch_id]
        if batch["status"] == "in_progress" and time.time() - batch["_created"] >= self.delay:
            self._finish(batch, answer, render)
        return _public(batch)

    def _finish(self, batch: dict[str, Any], answer: Responder, render: Render) -> None:
        """Answer every line (or none, when the batch expires) and write the output and error files."""
        expired = self.expire > 0
        self.expire -= expired
        out: list[bytes] = []
        errors: list[bytes] = []
        for number, line in enumerate(self.files[batch["input_file_id"]].splitlines()):
            if not line.strip():
                continue
            request = json.loads(line)
            custom_id, body = request["custom_id"], request["body"]
            row: dict[str, Any] = {"id": f"batch_req_{batch['id']}_{number}", "custom_id": custom_id,
                                   "response": None, "error": None}
            if expired:
                row["error"] = {"code": "batch_expired",
                                "message": "This request could not be executed before the completion window expired."}
                errors.append(json.dumps(row).encode())
                continue
            self.lines.append(body)
            if self.fail_lines > 0:
                self.fail_lines -= 1
                reply = Reply(status=500, content="The server had an error while processing your request.")
            else:
                try:
                    reply = coerce(answer({**body, "_batch": batch["id"]}))
                except Exception as exc:
                    reply = Reply(status=500, content=f"{type(exc).__name__}: {exc}")
            status, raw, _ = render(reply, body, number + 1)
            row["response"] = {"status_code": status, "request_id": f"req_{number}", "body": json.loads(raw)}
            if self.garbage_lines > 0:
                self.garbage_lines -= 1
                out.append(b'{"custom_id": "' + custom_id.encode() + b'", "response": {"status_code": 200, "body": {')
            elif status == 200:
                out.append(json.dumps(row).encode())
            else:
                errors.append(json.dumps(row).encode())
        batch["status"] = "expired" if expired else "completed"
        batch["completed_at" if not expired else "expired_at"] = int(time.time())
        batch["request_counts"] = {"total": len(batch["_custom_ids"]), "completed": len(out), "failed": len(errors)}
        for name, rows in (("output_file_id", out), ("error_file_id", errors)):
            if rows:
                file_id = self._new_id("file")
                self.files[file_id] = b"\n".join(rows) + b"\n"
                batch[name] = file_id


def _public(batch: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in batch.items() if not key.startswith("_")}

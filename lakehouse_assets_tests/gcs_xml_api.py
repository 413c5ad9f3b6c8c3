"""The part of Google Cloud Storage's XML API that delta-rs needs, in front of fake-gcs-server.

delta-rs (and obstore) reach GCS through the Rust `object_store` crate, which speaks GCS's XML API:
uploads are `PUT /BUCKET/OBJECT`, a Delta commit is such an upload with `x-goog-if-generation-match: 0`
(create only if absent: two writers of one version, one wins, the other gets 412), and the log is
listed with `GET /BUCKET?list-type=2&prefix=...&start-after=...`. fake-gcs-server implements GCS's
JSON API well but not these: XML uploads answer 400, and `start-after` is ignored
(`test_clouds.py::test_fake_gcs_server_lacks_what_delta_rs_needs` keeps checking that). This layer adds
exactly those behaviours, written from Google's XML API reference, and passes everything else (the
JSON API pyiceberg and pyarrow use) through unchanged:

* `PUT /BUCKET/OBJECT` (https://cloud.google.com/storage/docs/xml-api/put-object-upload) with
  `x-goog-if-generation-match` (https://cloud.google.com/storage/docs/xml-api/reference-headers#xgoogifgenerationmatch):
  stored through fake-gcs-server's JSON multipart upload with `ifGenerationMatch`, which it honours;
  uploads of one object name are serialised here too, so a planted race has exactly one winner.
  Answers 200 with `ETag` and `x-goog-generation`, or 412 `PreconditionFailed`.
* `PUT` with `x-goog-copy-source` (https://cloud.google.com/storage/docs/xml-api/put-object-copy).
* `GET`/`HEAD /BUCKET/OBJECT` (https://cloud.google.com/storage/docs/xml-api/get-object-download),
  `Range` included, with the headers object_store requires (`ETag`, `Last-Modified`, `Content-Length`,
  `x-goog-generation`); `DELETE /BUCKET/OBJECT`.
* `GET /BUCKET?list-type=2` (https://cloud.google.com/storage/docs/xml-api/get-bucket-list): `prefix`,
  `delimiter`, `start-after`, `max-keys` and `continuation-token`, answered as `ListBucketResult` XML.

Multipart XML uploads (`?uploads`) answer 501, loudly: the suite's Delta logs and checkpoints are small.

It runs as a process of its own (`python gcs_xml_api.py --upstream URL --port N`, servers.py starts it and
stops it by PID): in the test process it would deadlock, because pyarrow's GCS client holds the GIL while it
opens a file.
"""

from __future__ import annotations

import email.utils
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

_JSON_PREFIXES = ("/storage/", "/upload/", "/download/", "/_internal/")


class GcsXmlApi:
    """The layer as a server on 127.0.0.1: `url` is what clients use as the GCS endpoint."""

    def __init__(self, upstream: str, port: int = 0):
        self.upstream = upstream.rstrip("/")
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        handler = type("Handler", (_Handler,), {"api": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="gcs-xml-api", daemon=True)

    def start(self) -> "GcsXmlApi":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def lock(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

    # ---- fake-gcs-server's JSON API

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):
        """(status, headers, body) of one request to fake-gcs-server."""
        request = urllib.request.Request(self.upstream + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def metadata(self, bucket: str, name: str) -> dict | None:
        status, _, body = self.call("GET", f"/storage/v1/b/{bucket}/o/{_q(name)}")
        return json.loads(body) if status == 200 else None

    def upload(self, bucket: str, name: str, data: bytes, if_generation_match: str | None, content_type: str) -> tuple[int, dict | None]:
        """A JSON multipart upload (fake-gcs-server honours ifGenerationMatch on these)."""
        boundary = "lakehouse-xml-api-boundary"
        meta = json.dumps({"name": name, "contentType": content_type}).encode()
        body = (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode() + meta
            + f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode() + data + f"\r\n--{boundary}--\r\n".encode()
        )  # fmt: skip
        query = {"uploadType": "multipart", "name": name}
        if if_generation_match is not None:
            query["ifGenerationMatch"] = if_generation_match
        status, _, out = self.call(
            "POST", f"/upload/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(query)}", body, {"Content-Type": f"multipart/related; boundary={boundary}"}
        )
        return status, (json.loads(out) if status == 200 else None)

    def list(self, bucket: str, prefix: str) -> list[dict]:
        """Every object under `prefix` (all pages), sorted by name."""
        items, token = [], None
        while True:
            query = {"prefix": prefix, "maxResults": "1000", **({"pageToken": token} if token else {})}
            status, _, body = self.call("GET", f"/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(query)}")
            if status != 200:
                raise OSError(f"listing gs://{bucket}/{prefix} on fake-gcs-server answered {status}: {body[:200]!r}")
            page = json.loads(body)
            items += page.get("items", [])
            token = page.get("nextPageToken")
            if not token:
                return sorted(items, key=lambda i: i["name"])


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _http_date(rfc3339: str) -> str:
    return email.utils.format_datetime(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")), usegmt=True)


def _error(code: str, message: str) -> bytes:
    return f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>".encode()


class _Handler(BaseHTTPRequestHandler):
    api: GcsXmlApi
    protocol_version = "HTTP/1.1"
    # A response is two writes (headers, then body) on a kept-alive connection: with Nagle's algorithm the
    # body waits for the client's delayed ACK of the headers, ~40 ms per request.
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:  # quiet: the suite's output is for test results
        pass

    # ---- routing

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith(_JSON_PREFIXES) or url.path == "/":
            return self._forward(method)
        bucket, _, name = url.path.lstrip("/").partition("/")
        bucket, name = urllib.parse.unquote(bucket), urllib.parse.unquote(name)
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        if not name:
            if method == "GET" and query.get("list-type") == "2":
                return self._list(bucket, query)
            return self._forward(method)
        if "uploads" in query or "uploadId" in query:
            return self._send(501, _error("NotImplemented", "multipart XML uploads are not emulated here"))
        if method == "PUT":
            return self._copy(bucket, name) if "x-goog-copy-source" in self.headers else self._put(bucket, name)
        if method in ("GET", "HEAD"):
            return self._get(bucket, name, query, head=method == "HEAD")
        if method == "DELETE":
            status, _, _ = self.api.call("DELETE", f"/storage/v1/b/{bucket}/o/{_q(name)}")
            return self._send(204 if status in (200, 204) else 404, b"" if status in (200, 204) else _error("NoSuchKey", name))
        return self._forward(method)

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    # ---- the XML API

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _put(self, bucket: str, name: str) -> None:
        data = self._body()
        match = self.headers.get("x-goog-if-generation-match")
        with self.api.lock(f"{bucket}/{name}"):
            status, meta = self.api.upload(bucket, name, data, match, self.headers.get("Content-Type") or "application/octet-stream")
        if status == 412:
            return self._send(412, _error("PreconditionFailed", f"At least one of the pre-conditions you specified did not hold: {name}"))
        if status != 200:
            return self._send(status, _error("InternalError", f"fake-gcs-server answered {status}"))
        self._send(200, b"", {"ETag": f'"{meta.get("etag") or meta["md5Hash"]}"', "x-goog-generation": str(meta["generation"])})

    def _copy(self, bucket: str, name: str) -> None:
        self._body()
        source = urllib.parse.unquote(self.headers["x-goog-copy-source"]).lstrip("/")
        src_bucket, _, src_name = source.partition("/")
        with self.api.lock(f"{bucket}/{name}"):
            if self.headers.get("x-goog-if-generation-match") == "0" and self.api.metadata(bucket, name) is not None:
                return self._send(412, _error("PreconditionFailed", f"{name} exists"))
            status, _, body = self.api.call("GET", f"/storage/v1/b/{src_bucket}/o/{_q(src_name)}?alt=media")
            if status != 200:
                return self._send(404, _error("NoSuchKey", src_name))
            status, meta = self.api.upload(bucket, name, body, None, "application/octet-stream")
        self._send(200 if status == 200 else 500, b"<CopyObjectResult/>", {"ETag": f'"{(meta or {}).get("etag", "")}"'})

    def _get(self, bucket: str, name: str, query: dict, head: bool) -> None:
        meta = self.api.metadata(bucket, name)
        if meta is None or ("generation" in query and str(meta["generation"]) != query["generation"]):
            return self._send(404, b"" if head else _error("NoSuchKey", f"No such object: {bucket}/{name}"))
        headers = {
            "ETag": f'"{meta.get("etag") or meta["md5Hash"]}"',
            "Last-Modified": _http_date(meta["updated"]),
            "x-goog-generation": str(meta["generation"]),
            "Content-Type": meta.get("contentType") or "application/octet-stream",
            "Accept-Ranges": "bytes",
        }
        if head:
            return self._send(200, b"", headers, length=int(meta["size"]))
        upstream_headers = {"Range": self.headers["Range"]} if self.headers.get("Range") else {}
        status, got, body = self.api.call("GET", f"/storage/v1/b/{bucket}/o/{_q(name)}?alt=media", headers=upstream_headers)
        if status == 206:
            headers["Content-Range"] = got.get("Content-Range", "")
        elif status == 416:
            return self._send(416, _error("InvalidRange", self.headers.get("Range", "")))
        self._send(status, body, headers)

    def _list(self, bucket: str, query: dict) -> None:
        """ListBucketResult of GCS's XML API (the shape S3's ListObjectsV2 also has)."""
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter") or None
        after = query.get("continuation-token") or query.get("start-after") or ""
        max_keys = int(query.get("max-keys") or 1000)
        entries: list[tuple[str, dict | None]] = []  # (key, object) or (common prefix, None), in name order
        seen_prefixes = set()
        for item in self.api.list(bucket, prefix):
            key = item["name"]
            if delimiter and delimiter in key[len(prefix):]:
                common = key[: len(prefix) + key[len(prefix):].index(delimiter) + len(delimiter)]
                if common not in seen_prefixes and common > after:
                    seen_prefixes.add(common)
                    entries.append((common, None))
            elif key > after:
                entries.append((key, item))
        page, rest = entries[:max_keys], entries[max_keys:]
        xml = ["<?xml version='1.0' encoding='UTF-8'?>", "<ListBucketResult xmlns='http://doc.s3.amazonaws.com/2006-03-01'>"]
        xml.append(f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(page)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>")
        xml.append(f"<IsTruncated>{'true' if rest else 'false'}</IsTruncated>")
        if rest:
            xml.append(f"<NextContinuationToken>{escape(page[-1][0])}</NextContinuationToken>")
        for key, item in page:
            if item is None:
                xml.append(f"<CommonPrefixes><Prefix>{escape(key)}</Prefix></CommonPrefixes>")
            else:
                modified = datetime.fromisoformat(item["updated"].replace("Z", "+00:00")).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
                xml.append(
                    f"<Contents><Key>{escape(key)}</Key><Generation>{item['generation']}</Generation><LastModified>{modified}</LastModified>"
                    f"<ETag>\"{escape(item.get('etag') or item.get('md5Hash', ''))}\"</ETag><Size>{item['size']}</Size></Contents>"
                )
        xml.append("</ListBucketResult>")
        self._send(200, "".join(xml).encode(), {"Content-Type": "application/xml; charset=UTF-8"})

    # ---- plumbing

    def _forward(self, method: str) -> None:
        body = self._body() if method in ("POST", "PUT", "PATCH") else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection", "accept-encoding")}
        status, got, out = self.api.call(method, self.path, body, headers)
        passed = {k: v for k, v in got.items() if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server")}
        self._send(status, out if method != "HEAD" else b"", passed, length=int(got.get("Content-Length") or 0) if method == "HEAD" else None)

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, length: int | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="fake-gcs-server's URL")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    api = GcsXmlApi(args.upstream, port=args.port)
    api.server.serve_forever()

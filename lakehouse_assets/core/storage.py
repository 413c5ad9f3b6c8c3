"""Where bytes live: URIs, and the one storage configuration handed to pyarrow, pyiceberg and delta-rs.

`file://` is the default; `s3://` goes through the very same code with an endpoint/region/credentials
taken from the standard AWS environment or given explicitly. Credentials never appear in `repr`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.fs as pafs

from .errors import CatalogError

SUPPORTED_SCHEMES = ("file", "s3")


def normalize_uri(location: str) -> str:
    """A local path or URI -> an absolute URI without a trailing slash."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = parsed.path if parsed.scheme == "file" else location
        return Path(path).expanduser().resolve().as_uri().rstrip("/")
    if parsed.scheme in ("s3a", "s3n"):
        location = "s3" + location[len(parsed.scheme):]
        parsed = urlparse(location)
    if parsed.scheme not in SUPPORTED_SCHEMES:
        raise CatalogError(
            f"Storage location {location!r} uses the URI scheme {parsed.scheme!r}, which is not supported. "
            f"Use one of: {', '.join(s + '://' for s in SUPPORTED_SCHEMES)} or a local path."
        )
    return location.rstrip("/")


def join_uri(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


def relative_to(root: str, uri: str) -> str:
    """Path of `uri` relative to the table root, as Delta stores it."""
    root = root.rstrip("/") + "/"
    if uri.startswith(root):
        return uri[len(root):]
    # Iceberg may hand back `file:/x` for `file:///x`; compare on the path.
    if urlparse(uri).path.startswith(urlparse(root).path):
        return urlparse(uri).path[len(urlparse(root).path):]
    raise ValueError(f"{uri} is not under the table root {root}")


@dataclass(frozen=True)
class StorageConfig:
    """Object-store settings. Empty fields fall back to the standard AWS environment variables."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    allow_http: bool | None = None

    @classmethod
    def from_env(cls, **overrides) -> "StorageConfig":
        env = os.environ
        values = dict(
            endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
            access_key_id=env.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
            session_token=env.get("AWS_SESSION_TOKEN"),
            allow_http=None,
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def _http(self) -> bool:
        if self.allow_http is not None:
            return self.allow_http
        return bool(self.endpoint_url and self.endpoint_url.startswith("http://"))

    # ---- per-library views of the same settings

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """pyarrow filesystem and path inside it."""
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            return pafs.LocalFileSystem(), parsed.path
        if parsed.scheme == "s3":
            kwargs = dict(region=self.region or "us-east-1")
            if self.endpoint_url:
                endpoint = urlparse(self.endpoint_url)
                kwargs["endpoint_override"] = endpoint.netloc or self.endpoint_url
                kwargs["scheme"] = endpoint.scheme or ("http" if self._http else "https")
            if self.access_key_id:
                kwargs.update(access_key=self.access_key_id, secret_key=self.secret_access_key, session_token=self.session_token)
            return pafs.S3FileSystem(**kwargs), parsed.netloc + parsed.path
        raise CatalogError(f"URI scheme {parsed.scheme!r} of {uri!r} is not supported; use file:// or s3://.")

    def delta_options(self, uri: str) -> dict[str, str] | None:
        """delta-rs `storage_options`."""
        if not uri.startswith("s3://"):
            return None
        opts = {"AWS_REGION": self.region or "us-east-1"}
        if self.endpoint_url:
            opts["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self._http:
            opts["AWS_ALLOW_HTTP"] = "true"
        if self.access_key_id:
            opts["AWS_ACCESS_KEY_ID"] = self.access_key_id
            opts["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key or ""
        if self.session_token:
            opts["AWS_SESSION_TOKEN"] = self.session_token
        return opts

    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties."""
        props: dict[str, str] = {}
        if self.endpoint_url:
            props["s3.endpoint"] = self.endpoint_url
        if self.region:
            props["s3.region"] = self.region
        if self.access_key_id:
            props["s3.access-key-id"] = self.access_key_id
            props["s3.secret-access-key"] = self.secret_access_key or ""
        if self.session_token:
            props["s3.session-token"] = self.session_token
        return props


def delete_files(storage: StorageConfig, uris: list[str]) -> None:
    """Best-effort removal of files this process wrote (used when a commit did not land)."""
    for uri in uris:
        fs, path = storage.filesystem(uri)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass


# ---------------------------------------------------------------- actionable storage errors

S3_PERMISSIONS = "s3:ListBucket on the bucket and s3:GetObject, s3:PutObject, s3:DeleteObject on its objects"


def _where(storage: StorageConfig) -> str:
    return f"endpoint {storage.endpoint_url or 'AWS default'}, region {storage.region or 'us-east-1 (default)'}"


def storage_error(storage: StorageConfig, uri: str, error: BaseException) -> CatalogError | None:
    """Turn a pyarrow/AWS SDK error text into an actionable CatalogError; None if it is not a storage problem."""
    text = str(error)
    if any(s in text for s in ("ACCESS_DENIED", "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "INVALID_ACCESS_KEY_ID", "HTTP status 403")):
        return CatalogError(
            f"Access denied to {uri} ({_where(storage)}). The credential (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            f"the S3Resource or the lakehouse resource's s3_* settings) must be valid and allow {S3_PERMISSIONS}."
        )
    if any(s in text for s in ("NETWORK_CONNECTION", "curlCode", "Could not resolve", "Couldn't connect", "Could not connect")):
        return CatalogError(
            f"Cannot reach the object store for {uri} ({_where(storage)}). Check AWS_ENDPOINT_URL (scheme, host and "
            "port) and that the server is running and reachable from the driver and the Spark executors."
        )
    if any(s in text for s in ("PermanentRedirect", "AuthorizationHeaderMalformed", "HTTP status 301", "IllegalLocationConstraint", "wrong region")):
        return CatalogError(f"The bucket of {uri} is not in region {storage.region or 'us-east-1'} ({_where(storage)}). Set AWS_REGION to the bucket's region.")
    return None


def check_access(storage: StorageConfig, uri: str) -> None:
    """One cheap request before any work starts: a wrong endpoint, region, credential or bucket fails here, clearly."""
    if not uri.startswith("s3://"):
        return
    fs, path = storage.filesystem(uri)
    bucket = path.split("/", 1)[0]
    try:
        info = fs.get_file_info(bucket)
    except OSError as e:
        raise (storage_error(storage, uri, e) or CatalogError(f"Cannot access {uri} ({_where(storage)}): {e}")) from None
    if info.type == pafs.FileType.NotFound:
        raise CatalogError(f"Bucket {bucket!r} of {uri} does not exist ({_where(storage)}). Create it, or fix the warehouse URI or the endpoint.")

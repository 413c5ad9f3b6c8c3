"""Where bytes live: URIs, and the one storage configuration handed to pyarrow, pyiceberg and delta-rs.

`file://` is the default; `s3://`, `gs://` and `abfss://` go through the very same code: this module
turns one `StorageConfig` (endpoints and credentials from each cloud's standard environment variables
or given explicitly) into a pyarrow file system (data files), pyiceberg FileIO properties (Iceberg
metadata) and delta-rs storage options (the Delta log). Credentials never appear in `repr`.

Azure locations are stored in the Hadoop form `abfss://<container>@<account>.dfs.core.windows.net/<path>`
(what Iceberg and Spark engines expect); `az://<container>/<path>`, `azure://...`, `abfs://...` and
`abfss://<container>/<path>` are accepted and get the account from the configuration.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote, urlparse

import pyarrow.fs as pafs

from ..errors import CatalogError

log = logging.getLogger("lakehouse")

SUPPORTED_SCHEMES = ("file", "s3", "gs", "abfss")
# Spellings each library or tool uses for the same stores, mapped to the one we store.
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "az": "abfss", "azure": "abfss", "abfs": "abfss"}
AZURE_DFS_SUFFIX = ".dfs.core.windows.net"


def normalize_uri(location: str) -> str:
    """A local path or URI -> an absolute URI without a trailing slash."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = parsed.path if parsed.scheme == "file" else location
        # RFC 3986 lets a path hold sub-delimiters unencoded; `as_uri` would encode `+` (and `=`, `,`...) as %XX, which
        # code reading the URI's path as a file name (SQLite's URL, os.makedirs) then takes literally.
        return "file://" + quote(str(Path(path).expanduser().resolve()), safe="/!$&'()*+,;=:@").rstrip("/")
    if parsed.scheme in SCHEME_ALIASES:
        location = SCHEME_ALIASES[parsed.scheme] + location[len(parsed.scheme):]
        parsed = urlparse(location)
    if parsed.scheme not in SUPPORTED_SCHEMES:
        raise CatalogError(
            f"Storage location {location!r} uses the URI scheme {parsed.scheme!r}, which is not supported. "
            f"Use one of: {', '.join(s + '://' for s in SUPPORTED_SCHEMES)} (also accepted: "
            f"{', '.join(a + '://' for a in SCHEME_ALIASES)}) or a local path."
        )
    return location.rstrip("/")


def azure_parts(uri: str) -> tuple[str, str | None, str]:
    """(container, account or None, path inside the container) of an abfss:// URI in either form."""
    parsed = urlparse(uri)
    container, account = parsed.netloc, None
    if "@" in parsed.netloc:
        container, host = parsed.netloc.split("@", 1)
        account = host.split(".", 1)[0]
    return container, account, parsed.path.strip("/")


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


def _env(*names: str) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def _with_scheme(endpoint: str | None) -> str | None:
    """`STORAGE_EMULATOR_HOST` is often given as host:port."""
    if endpoint and "://" not in endpoint:
        return "http://" + endpoint
    return endpoint


def delta_path(path: str) -> str:
    """A Delta add/remove path as a path relative to the root (the form `relative_to` returns).

    The Delta protocol stores paths as URIs: delta-rs percent-encodes what it is given (a file under
    `country=x%2Fy/` is logged as `country=x%252Fy/`) and hands the encoded form back.
    """
    from urllib.parse import unquote

    return unquote(path)


# What delta-rs leaves unencoded in a logged path (besides letters, digits and `_.-~`), measured on 1.6.6.
_DELTA_PATH_SAFE = "/!$&'()+,:;=@"


def delta_uri_path(path: str) -> str:
    """A path relative to the root as the Delta log stores it: percent-encoded as delta-rs encodes the paths it is
    given (`delta_path` reads it back), so every reader finds the file (a folder `country=a+b%25/` is logged
    `country=a+b%2525/`)."""
    from urllib.parse import quote

    return quote(path, safe=_DELTA_PATH_SAFE)


@dataclass(frozen=True)
class StorageConfig:
    """Object-store settings for S3, GCS and Azure. Empty fields fall back to each cloud's standard environment variables."""

    # S3 (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    allow_http: bool | None = None
    # GCS: credentials are Google's Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS,
    # workload identity, gcloud), read by each library itself. An endpoint (STORAGE_EMULATOR_HOST)
    # means an emulator: requests go there unauthenticated.
    gcs_endpoint_url: str | None = None
    gcs_project_id: str | None = None
    # Azure (AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN, AZURE_CLIENT_ID,
    # AZURE_CLIENT_SECRET, AZURE_TENANT_ID, AZURE_STORAGE_ENDPOINT). Without a key, SAS or client secret each
    # library uses Azure's default credential chain (managed identity, Azure CLI...).
    azure_account_name: str | None = None
    azure_account_key: str | None = field(default=None, repr=False)
    azure_sas_token: str | None = field(default=None, repr=False)
    azure_client_id: str | None = None
    azure_client_secret: str | None = field(default=None, repr=False)
    azure_tenant_id: str | None = None
    # A path-style blob endpoint (Azurite: http://127.0.0.1:10000); blobs live at <endpoint>/<account>/<container>/...
    azure_endpoint_url: str | None = None

    @classmethod
    def from_env(cls, **overrides) -> "StorageConfig":
        values = dict(
            endpoint_url=_env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            region=_env("AWS_REGION", "AWS_DEFAULT_REGION"),
            access_key_id=_env("AWS_ACCESS_KEY_ID"),
            secret_access_key=_env("AWS_SECRET_ACCESS_KEY"),
            session_token=_env("AWS_SESSION_TOKEN"),
            allow_http=None,
            gcs_endpoint_url=_with_scheme(_env("STORAGE_EMULATOR_HOST")),
            gcs_project_id=_env("GOOGLE_CLOUD_PROJECT"),
            azure_account_name=_env("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"),
            azure_account_key=_env("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY"),
            azure_sas_token=_env("AZURE_STORAGE_SAS_TOKEN"),
            azure_client_id=_env("AZURE_CLIENT_ID"),
            azure_client_secret=_env("AZURE_CLIENT_SECRET"),
            azure_tenant_id=_env("AZURE_TENANT_ID"),
            azure_endpoint_url=_env("AZURE_STORAGE_ENDPOINT"),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values.get("gcs_endpoint_url"):
            values["gcs_endpoint_url"] = _with_scheme(values["gcs_endpoint_url"])
        return cls(**values)

    @property
    def _http(self) -> bool:
        if self.allow_http is not None:
            return self.allow_http
        return bool(self.endpoint_url and self.endpoint_url.startswith("http://"))

    def for_warehouse(self, uri: str) -> tuple[str, "StorageConfig"]:
        """The warehouse URI in its stored form, and this configuration completed by what the URI names.

        Azure: the account comes from the URI (`container@account...`) or from the configuration; both
        present and different is a mistake."""
        uri = normalize_uri(uri)
        if not uri.startswith("abfss://"):
            return uri, self
        container, account, path = azure_parts(uri)
        if account and self.azure_account_name and account != self.azure_account_name:
            raise CatalogError(
                f"Warehouse {uri} names the Azure storage account {account!r} but the configuration names "
                f"{self.azure_account_name!r} (AZURE_STORAGE_ACCOUNT_NAME or the lakehouse resource's azure_account_name). "
                "Use one account for both."
            )
        account = account or self.azure_account_name
        if not account or not container:
            raise CatalogError(
                f"Warehouse {uri}: no Azure storage account is configured. Use "
                "abfss://<container>@<account>.dfs.core.windows.net/<path>, or set AZURE_STORAGE_ACCOUNT_NAME "
                "(or the lakehouse resource's azure_account_name) and a credential (AZURE_STORAGE_ACCOUNT_KEY, "
                "AZURE_STORAGE_SAS_TOKEN, or AZURE_CLIENT_ID/AZURE_CLIENT_SECRET/AZURE_TENANT_ID)."
            )
        stored = f"abfss://{container}@{account}{AZURE_DFS_SUFFIX}" + (f"/{path}" if path else "")
        return stored, replace(self, azure_account_name=account)

    # ---- per-library views of the same settings

    def _azure_account(self, uri: str) -> tuple[str, str]:
        container, account, path = azure_parts(uri)
        account = account or self.azure_account_name
        if not account:
            raise CatalogError(f"{uri}: no Azure storage account is configured (set AZURE_STORAGE_ACCOUNT_NAME or use container@account in the URI).")
        return account, f"{container}/{path}".rstrip("/")

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """pyarrow filesystem and path inside it."""
        parsed = urlparse(uri)
        if parsed.scheme in ("file", ""):  # "": a bare local path, as a Hadoop catalog on a local folder records its files
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
        if parsed.scheme == "gs":
            kwargs = dict(project_id=self.gcs_project_id)
            if self.gcs_endpoint_url:
                endpoint = urlparse(self.gcs_endpoint_url)
                kwargs.update(anonymous=True, endpoint_override=endpoint.netloc, scheme=endpoint.scheme)
            return pafs.GcsFileSystem(**kwargs), parsed.netloc + parsed.path
        if parsed.scheme == "abfss":
            account, path = self._azure_account(uri)
            kwargs = dict(account_name=account)
            if self.azure_account_key:
                kwargs["account_key"] = self.azure_account_key
            elif self.azure_sas_token:
                kwargs["sas_token"] = self.azure_sas_token
            elif self.azure_client_secret:
                kwargs.update(client_id=self.azure_client_id, client_secret=self.azure_client_secret, tenant_id=self.azure_tenant_id)
            if self.azure_endpoint_url:
                endpoint = urlparse(self.azure_endpoint_url)
                kwargs.update(blob_storage_authority=endpoint.netloc, dfs_storage_authority=endpoint.netloc)
                kwargs.update(blob_storage_scheme=endpoint.scheme, dfs_storage_scheme=endpoint.scheme)
            return pafs.AzureFileSystem(**kwargs), path
        raise CatalogError(f"URI scheme {parsed.scheme!r} of {uri!r} is not supported; use file://, s3://, gs:// or abfss://.")

    def delta_options(self, uri: str) -> dict[str, str] | None:
        """delta-rs `storage_options` (keys of the Rust object_store crate)."""
        scheme = urlparse(uri).scheme
        if scheme == "s3":
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
        if scheme == "gs":
            if not self.gcs_endpoint_url:
                return {}  # Application Default Credentials, read by object_store from the environment
            # object_store's way to reach an emulator: a service-account document naming the base URL, no OAuth.
            emulator = {"gcs_base_url": self.gcs_endpoint_url, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""}
            return {"google_service_account_key": json.dumps(emulator), "allow_http": "true"}
        if scheme == "abfss":
            account, _ = self._azure_account(uri)
            opts = {"azure_storage_account_name": account}
            if self.azure_account_key:
                opts["azure_storage_account_key"] = self.azure_account_key
            elif self.azure_sas_token:
                opts["azure_storage_sas_token"] = self.azure_sas_token
            elif self.azure_client_secret:
                opts.update(azure_client_id=self.azure_client_id or "", azure_client_secret=self.azure_client_secret, azure_tenant_id=self.azure_tenant_id or "")
            if self.azure_endpoint_url:
                opts["azure_storage_endpoint"] = join_uri(self.azure_endpoint_url, account)
                if self.azure_endpoint_url.startswith("http://"):
                    opts["allow_http"] = "true"
            return opts
        return None

    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties (read by core.fileio.LakehouseFileIO, pyiceberg's PyArrowFileIO)."""
        props: dict[str, str] = {"py-io-impl": "lakehouse_assets.core.io.fileio.LakehouseFileIO"}
        if self.endpoint_url:
            props["s3.endpoint"] = self.endpoint_url
        if self.region:
            props["s3.region"] = self.region
        if self.access_key_id:
            props["s3.access-key-id"] = self.access_key_id
            props["s3.secret-access-key"] = self.secret_access_key or ""
        if self.session_token:
            props["s3.session-token"] = self.session_token
        if self.gcs_endpoint_url:
            props["gcs.service.host"] = self.gcs_endpoint_url
            props["lakehouse.gcs.anonymous"] = "true"
        if self.gcs_project_id:
            props["gcs.project-id"] = self.gcs_project_id
        for key, value in (
            ("adls.account-name", self.azure_account_name),
            ("adls.account-key", self.azure_account_key),
            ("adls.sas-token", None if self.azure_account_key else self.azure_sas_token),
        ):
            if value:
                props[key] = value
        if self.azure_client_secret and not (self.azure_account_key or self.azure_sas_token):
            props.update({"adls.client-id": self.azure_client_id or "", "adls.client-secret": self.azure_client_secret, "adls.tenant-id": self.azure_tenant_id or ""})
        if self.azure_endpoint_url:
            endpoint = urlparse(self.azure_endpoint_url)
            for service in ("blob", "dfs"):
                props[f"adls.{service}-storage-authority"] = endpoint.netloc
                props[f"adls.{service}-storage-scheme"] = endpoint.scheme
        return props


def delete_files(storage: StorageConfig, uris: list[str]) -> list[str]:
    """Best-effort removal of files this process wrote (used when a commit did not land). A file that cannot be
    removed (storage unreachable, no delete permission) is logged and left to orphan cleanup, and the others are
    still removed: the caller is handling its own error, which must reach the user, not the cleanup's.
    Returns the URIs left behind."""
    failed = []
    for uri in uris:
        try:
            fs, path = storage.filesystem(uri)
            fs.delete_file(path)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - best effort, see above
            failed.append((uri, e))
    if failed:
        uri, e = failed[0]
        log.warning("%d written file(s) could not be removed and are left to orphan cleanup, e.g. %s (%s: %s)", len(failed), uri, type(e).__name__, e)
    return [uri for uri, _ in failed]


# ---------------------------------------------------------------- actionable storage errors

S3_PERMISSIONS = "s3:ListBucket on the bucket and s3:GetObject, s3:PutObject, s3:DeleteObject on its objects"
GCS_PERMISSIONS = "storage.buckets.get, storage.objects.list, storage.objects.get, storage.objects.create and storage.objects.delete on the bucket"
AZURE_PERMISSIONS = (
    "read, write, delete and list on the container's blobs (role Storage Blob Data Contributor; a SAS token needs "
    "the r, a, c, w, d and l permissions)"
)


@dataclass(frozen=True)
class _Cloud:
    bucket: str  # what a top-level folder is called
    credential: str  # where the credential comes from
    endpoint_hint: str
    permissions: str
    where: str


def _cloud(storage: StorageConfig, uri: str) -> _Cloud:
    scheme = urlparse(uri).scheme
    if scheme == "gs":
        return _Cloud(
            "Bucket",
            "Google Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, workload identity or gcloud)",
            "STORAGE_EMULATOR_HOST (or the lakehouse resource's gcs_endpoint_url)",
            GCS_PERMISSIONS,
            f"endpoint {storage.gcs_endpoint_url or 'storage.googleapis.com'}",
        )
    if scheme == "abfss":
        account = azure_parts(uri)[1] or storage.azure_account_name
        return _Cloud(
            "Container",
            "AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN or AZURE_CLIENT_ID/AZURE_CLIENT_SECRET/AZURE_TENANT_ID "
            "(or the lakehouse resource's azure_* settings)",
            "AZURE_STORAGE_ENDPOINT (or the lakehouse resource's azure_endpoint_url)",
            AZURE_PERMISSIONS,
            f"account {account}, endpoint {storage.azure_endpoint_url or 'blob.core.windows.net'}",
        )
    return _Cloud(
        "Bucket",
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the S3Resource or the lakehouse resource's s3_* settings",
        "AWS_ENDPOINT_URL",
        S3_PERMISSIONS,
        f"endpoint {storage.endpoint_url or 'AWS default'}, region {storage.region or 'us-east-1 (default)'}",
    )


DENIED = (
    "ACCESS_DENIED", "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "INVALID_ACCESS_KEY_ID", "HTTP status 403",
    "AuthenticationFailed", "AuthorizationFailure", "AuthorizationPermissionMismatch", "403 Forbidden", "PERMISSION_DENIED",
    "UNAUTHENTICATED", "401 Unauthorized",
)  # fmt: skip
UNREACHABLE = ("NETWORK_CONNECTION", "curlCode", "Could not resolve", "Couldn't connect", "Could not connect", "Connection refused", "Failed to connect")


def storage_error(storage: StorageConfig, uri: str, error: BaseException) -> CatalogError | None:
    """Turn a pyarrow / cloud SDK error text into an actionable CatalogError; None if it is not a storage problem."""
    text = str(error)
    cloud = _cloud(storage, uri)
    if "Could not create a OAuth2 access token" in text:  # google-cloud-cpp found no credential to use
        return CatalogError(
            f"No Google credentials for {uri} ({cloud.where}): set GOOGLE_APPLICATION_CREDENTIALS to a service-account "
            "key file, or run with a service account (GKE workload identity, a GCE VM) or after `gcloud auth "
            "application-default login`; for an emulator set STORAGE_EMULATOR_HOST (or the lakehouse resource's gcs_endpoint_url)."
        )
    if any(s in text for s in DENIED):
        return CatalogError(
            f"Access denied to {uri} ({cloud.where}). The credential ({cloud.credential}) must be valid and allow {cloud.permissions}."
        )
    if any(s in text for s in UNREACHABLE):
        return CatalogError(
            f"Cannot reach the object store for {uri} ({cloud.where}). Check {cloud.endpoint_hint} (scheme, host and "
            "port) and that the server is running and reachable from the driver and the Spark executors."
        )
    if any(s in text for s in ("PermanentRedirect", "AuthorizationHeaderMalformed", "HTTP status 301", "IllegalLocationConstraint", "wrong region")):
        return CatalogError(f"The bucket of {uri} is not in region {storage.region or 'us-east-1'} ({cloud.where}). Set AWS_REGION to the bucket's region.")
    return None


CHECK_RETRY_SECONDS = 10


def check_access(storage: StorageConfig, uri: str) -> None:
    """One cheap request before any work starts: a wrong endpoint, region, credential or bucket fails here, clearly."""
    if urlparse(uri).scheme not in ("s3", "gs", "abfss"):
        return
    cloud = _cloud(storage, uri)
    fs, path = storage.filesystem(uri)
    if isinstance(fs, pafs.GcsFileSystem) and not storage.gcs_endpoint_url:
        # google-cloud-cpp retries a missing credential for 15 minutes by default: answer sooner.
        fs = pafs.GcsFileSystem(project_id=storage.gcs_project_id, retry_time_limit=timedelta(seconds=CHECK_RETRY_SECONDS))
    bucket = path.split("/", 1)[0]
    try:
        info = fs.get_file_info(bucket)
    except OSError as e:
        raise (storage_error(storage, uri, e) or CatalogError(f"Cannot access {uri} ({cloud.where}): {e}")) from None
    if info.type == pafs.FileType.NotFound:
        raise CatalogError(
            f"{cloud.bucket} {bucket!r} of {uri} does not exist ({cloud.where}). Create it, or fix the warehouse URI or the endpoint."
        )

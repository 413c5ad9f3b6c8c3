"""pyiceberg's PyArrowFileIO with the two settings it lacks for our storage configuration.

- Azure locations in the Hadoop form `abfss://<container>@<account>.dfs.core.windows.net/<path>`:
  PyArrowFileIO hands `<container>@<account>.dfs.core.windows.net/<path>` to pyarrow's
  AzureFileSystem, which wants `<container>/<path>` (the account is a FileIO property).
- GCS emulators: PyArrowFileIO always asks Google for credentials; `lakehouse.gcs.anonymous`
  (set by StorageConfig when an emulator endpoint is configured) makes requests unauthenticated.
"""

from __future__ import annotations

from urllib.parse import urlparse

from pyarrow.fs import FileSystem, GcsFileSystem
from pyiceberg.io import GCS_PROJECT_ID, GCS_SERVICE_HOST
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties

GCS_ANONYMOUS = "lakehouse.gcs.anonymous"
AZURE_SCHEMES = {"abfs", "abfss", "wasb", "wasbs"}


class LakehouseFileIO(PyArrowFileIO):
    @staticmethod
    def parse_location(location: str, properties: Properties = EMPTY_DICT) -> tuple[str, str, str]:
        scheme, netloc, path = PyArrowFileIO.parse_location(location, properties)
        if scheme in AZURE_SCHEMES and "@" in netloc:
            path = netloc.split("@", 1)[0] + urlparse(location).path
        return scheme, netloc, path

    def _initialize_gcs_fs(self) -> FileSystem:
        if self.properties.get(GCS_ANONYMOUS) != "true":
            return super()._initialize_gcs_fs()
        endpoint = urlparse(self.properties[GCS_SERVICE_HOST])
        return GcsFileSystem(anonymous=True, scheme=endpoint.scheme, endpoint_override=endpoint.netloc, project_id=self.properties.get(GCS_PROJECT_ID))

"""pyiceberg's PyArrowFileIO with the settings it lacks for our storage configuration.

- Azure locations in the Hadoop form `abfss://<container>@<account>.dfs.core.windows.net/<path>`:
  PyArrowFileIO hands `<container>@<account>.dfs.core.windows.net/<path>` to pyarrow's
  AzureFileSystem, which wants `<container>/<path>` (the account is a FileIO property).
- GCS emulators: PyArrowFileIO always asks Google for credentials; `lakehouse.gcs.anonymous`
  (set by StorageConfig when an emulator endpoint is configured) makes requests unauthenticated.
- Output buffers: PyArrowFileIO opens every file it writes (manifests, manifest lists, metadata JSON: kilobytes) with a
  1 MiB buffer. Allocating a process's first buffer of that size took 20-30 ms of system time (one page fault) in
  about half of the writers of a burst (8 processes committing at once on 2 cores, the first manifest each wrote),
  while the writer holding the commit lock waited for the CPU. Written files get OUTPUT_BUFFER_BYTES unless the
  catalog sets pyiceberg's `buffer-size`. Reads keep 1 MiB: on an object store each refill of the buffer is a request.
  Azure keeps 1 MiB for writes too: its output stream may stage a block per buffered write.
"""

from __future__ import annotations

from urllib.parse import urlparse

from pyarrow.fs import FileSystem, GcsFileSystem
from pyiceberg.io import GCS_PROJECT_ID, GCS_SERVICE_HOST
from pyiceberg.io.pyarrow import BUFFER_SIZE, PyArrowFile, PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties

GCS_ANONYMOUS = "lakehouse.gcs.anonymous"
AZURE_SCHEMES = {"abfs", "abfss", "wasb", "wasbs"}
OUTPUT_BUFFER_BYTES = 64 * 1024


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

    def new_output(self, location: str) -> PyArrowFile:
        scheme, netloc, path = self.parse_location(location, self.properties)
        if BUFFER_SIZE in self.properties or scheme in AZURE_SCHEMES:
            return super().new_output(location)
        return PyArrowFile(fs=self.fs_by_scheme(scheme, netloc), location=location, path=path, buffer_size=OUTPUT_BUFFER_BYTES)

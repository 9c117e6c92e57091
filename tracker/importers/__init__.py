"""Other tools' profiles into the trace store: ``tracker import FILE``.

``formats.py`` names each readable file kind and its reader; a reader turns a file into an
``Imported`` profile (``base.py``): its kernel launches in the order they ran, each with its NVTX or
``record_function`` ranges, geometry, time and counters under the catalog's names; ``run.py``
stores it as a run whose implementation is ``imported``, its layers and phases read from the
ranges."""

from tracker.importers.base import Imported, ImportedLaunch
from tracker.importers.formats import FORMATS, read
from tracker.importers.run import import_file

__all__ = ["FORMATS", "Imported", "ImportedLaunch", "import_file", "read"]

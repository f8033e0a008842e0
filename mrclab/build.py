"""Which build of the transport runs: compiled (setup.py builds it where a C compiler is), or the pure Python
sources, which stay the reference.

The compiled build is the transport compiled by mypyc (`COMPILED`) and the agent's batched datagram I/O in C
(`EXTENSIONS`: ``agent/batchio.py`` is its interface and its Python twin). The compiled modules sit beside
their sources, and Python prefers them; the sources run instead when ``MRCLAB_PURE=1`` is set, when the build
is incomplete, or when a source is newer than the compiled code (an edited checkout not yet rebuilt: ``make
build``), so an edit is never shadowed by a stale build. This module imports only the standard library:
setup.py reads `COMPILED` and `EXTENSIONS` from it before mrclab is installed.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# the per-packet transport: its state machine, wire format, timers and congestion control (the simulator and
# the scapy layer drive it and stay Python)
COMPILED = ("transport/__init__.py", "transport/config.py", "transport/connection.py", "transport/counters.py",
            "transport/departures.py", "transport/ev.py", "transport/events.py", "transport/receiver.py",
            "transport/rtt.py", "transport/sender.py", "transport/wire.py", "transport/congestion/__init__.py",
            "transport/congestion/base.py", "transport/congestion/dcqcn.py", "transport/congestion/nscc.py")
EXTENSIONS = {"agent/_batchio.c": "mrclab.agent._batchio"}  # C source -> module (sendmmsg, recvmmsg)
GROUP = "mrclab_transport"  # mypyc's shared library for the compiled modules: mrclab_transport__mypyc.*.so


def _module(source: str) -> str:
    return "mrclab." + source.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _extension(stem: Path) -> Path | None:
    """The extension module ``stem`` + this interpreter's suffix, if it was built."""
    return next((p for s in importlib.machinery.EXTENSION_SUFFIXES if (p := stem.with_name(stem.name + s)).exists()),
                None)


SHARED = f"{GROUP}__mypyc"  # the compiled code itself, a top-level module beside the package


def choose() -> tuple[str, str]:
    """("compiled" | "pure", why), decided from the environment and the files, before the transport is
    imported."""
    if os.environ.get("MRCLAB_PURE") == "1":
        return "pure", "MRCLAB_PURE=1"
    shims = [_extension(PACKAGE / source.removesuffix(".py")) for source in COMPILED]
    code = _extension(PACKAGE.parent / SHARED)
    extensions = {source: _extension(PACKAGE / source.removesuffix(".c")) for source in EXTENSIONS}
    if not code and not any(shims) and not any(extensions.values()):
        return "pure", "not compiled (no C compiler or mypyc when it was installed, or MRCLAB_PURE=1 then)"
    if not code or not all(shims) or not all(extensions.values()):
        return "pure", "the compiled build is incomplete (run `make build`)"
    # the compiled code is in the shared library (a module's own file is a shim, rewritten only when it changes)
    built_at = code.stat().st_mtime
    stale = [s for s in COMPILED if (PACKAGE / s).stat().st_mtime > built_at]
    stale += [s for s, built in extensions.items()
              if built and (PACKAGE / s).exists() and (PACKAGE / s).stat().st_mtime > built.stat().st_mtime]
    if stale:
        return "pure", f"the compiled build is older than {stale[0]} (run `make build`)"
    return "compiled", "mypyc, sendmmsg/recvmmsg"


class _Files(importlib.abc.MetaPathFinder):
    """Finds named modules in the files given: the .py sources ahead of their extension modules (pure), or
    mypyc's shared library beside the package, a top-level module whose folder need not be on sys.path
    (an editable install puts only the package there)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(self, fullname, path, target=None):
        file = self.files.get(fullname)
        if file is None:
            return None
        package = [str(file.parent)] if file.name == "__init__.py" else None
        return importlib.util.spec_from_file_location(fullname, file, submodule_search_locations=package)


BUILD, WHY = choose()
if not any(isinstance(f, _Files) for f in sys.meta_path):
    _shared = _extension(PACKAGE.parent / SHARED)
    sys.meta_path.insert(0, _Files({_module(s): PACKAGE / s for s in COMPILED} if BUILD == "pure"
                                   else {SHARED: _shared} if _shared else {}))


def running() -> dict[str, str]:
    """What results.json and `mrclab check` report: the build this process runs, and why."""
    from .transport import connection
    actual = "compiled" if not connection.__file__ or not connection.__file__.endswith(".py") else "pure"
    return {"build": actual, "why": WHY if actual == BUILD else f"{WHY}, but {connection.__file__} was imported"}

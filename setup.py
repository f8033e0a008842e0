"""The shipped topologies, scenarios and traces travel inside the package (mrclab/shipped/), so an installed
mrclab finds them with no checkout; a checkout uses its own folders (mrclab/shipped.py).

The transport is compiled with mypyc, and the agent's batched datagram I/O (mrclab/agent/_batchio.c) with the
C compiler, where a C compiler and mypyc are present (mrclab/build.py lists both); MRCLAB_PURE=1 builds
without them, and the pure sources serve wherever the compiled build is missing. In a checkout, `make build`
compiles them in place (`setup.py build_ext --inplace`)."""
import os
import runpy
import shutil
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithShipped(build_py):
    def run(self):
        super().run()
        for name in ("topologies", "scenarios", "traces"):
            shutil.copytree(HERE / name, Path(self.build_lib) / "mrclab" / "shipped" / name, dirs_exist_ok=True)


def compiled() -> list:
    """The transport's extension modules and the batched I/O, or none (pure Python) without a compiler or mypyc."""
    if os.environ.get("MRCLAB_PURE") == "1":
        return []
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    if not shutil.which(compiler):
        return []
    build = runpy.run_path(str(HERE / "mrclab" / "build.py"))
    # the checks `make typecheck` makes cover the whole project; here they would warn of its unused sections
    return [*mypycify(["--no-warn-unused-configs", *(f"mrclab/{s}" for s in build["COMPILED"])], opt_level="3",
                      group_name=build["GROUP"]),
            *(Extension(name, [f"mrclab/{source}"], extra_compile_args=["-O2"])
              for source, name in build["EXTENSIONS"].items())]


setup(cmdclass={"build_py": BuildWithShipped}, ext_modules=compiled())

"""The shipped topologies and scenarios travel inside the package (mrclab/shipped/), so an installed
mrclab finds them with no checkout; a checkout uses its own folders (mrclab/shipped.py)."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithShipped(build_py):
    def run(self):
        super().run()
        for name in ("topologies", "scenarios"):
            shutil.copytree(HERE / name, Path(self.build_lib) / "mrclab" / "shipped" / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithShipped})

"""Locate the package's config files in a source tree, a colcon install or a pip install."""

import os
from pathlib import Path
import sys

PACKAGE = 'physinf_ros'


def config_path(name: str) -> Path:
    """Path of config/<name>: $PHYSINF_ROS_CONFIG, then the source tree, then share/."""
    here = Path(__file__).resolve().parent
    # A colcon install puts the package in <prefix>/lib/pythonX.Y/site-packages/.
    prefix = here.parents[3] if len(here.parents) > 3 else here.parent
    candidates = [
        Path(os.environ['PHYSINF_ROS_CONFIG']) if os.environ.get('PHYSINF_ROS_CONFIG') else None,
        here.parent / 'config',                           # source tree, editable install
        prefix / 'share' / PACKAGE / 'config',            # colcon install
        Path(sys.prefix) / 'share' / PACKAGE / 'config',  # pip install (data_files)
    ]
    for folder in filter(None, candidates):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f'config/{name} not found in ' + ', '.join(
        str(c) for c in candidates if c))

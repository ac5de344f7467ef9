"""Find the package's console scripts as a user would run them (no ROS imports here)."""

from pathlib import Path
import shutil
import sys


def installed_command(script, module):
    """Find an installed console script (where ros2 run looks), else run its module."""
    try:
        from ament_index_python.packages import get_package_prefix
        exe = Path(get_package_prefix('physinf_ros')) / 'lib' / 'physinf_ros' / script
        if exe.is_file():
            return [str(exe)]
    except Exception:  # noqa: B902 - not in an ament prefix: fall back below
        pass
    found = shutil.which(script)
    return [found] if found else [sys.executable, '-m', module]

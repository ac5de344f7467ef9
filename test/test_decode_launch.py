"""
launch_testing: decode.launch.py brings up a decoder that gets ready and exits cleanly.

Runs wherever launch_testing is installed (a ROS 2 distribution); launch is not on PyPI, so
elsewhere this module is skipped and test_launch_static.py checks the launch file instead.
"""

import os
import unittest

import pytest

launch_testing = pytest.importorskip(
    'launch_testing', reason='launch_testing is not installed (it is not on PyPI); '
    'test_launch_static.py checks the launch file statically')

from ament_index_python.packages import get_package_share_directory  # noqa: E402, I100
from launch import LaunchDescription  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402


@pytest.mark.launch_test
def generate_test_description():
    launch_file = os.path.join(get_package_share_directory('physinf_ros'), 'launch',
                               'decode.launch.py')
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(launch_file),
                                 launch_arguments={'namespace': 'launch_test'}.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestDecoderComesUp(unittest.TestCase):

    def test_decoder_reports_ready(self, proc_output):
        proc_output.assertWaitFor('ready in', timeout=300, stream='stderr')


@launch_testing.post_shutdown_test()
class TestDecoderShutsDownCleanly(unittest.TestCase):

    def test_exit_code(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)

"""Start benchmark_node with config/bench.yaml, then the overrides given on the launch line."""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from physinf_ros.bench.params import PARAMS_BY_NAME
from physinf_ros.launch_args import declare, overrides

# The parameters a launch line may set; the rest come from params_file.
ARGUMENTS = tuple(PARAMS_BY_NAME[name] for name in (
    'model', 'modes', 'contexts', 'sessions', 'steps', 'warmup', 'exit_when_done'))


def generate_launch_description():
    defaults = os.path.join(get_package_share_directory('physinf_ros'), 'config', 'bench.yaml')
    return LaunchDescription(declare(ARGUMENTS) + [
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace for the benchmark node and its topics'),
        DeclareLaunchArgument('params_file', default_value=defaults,
                              description='YAML with the benchmark parameters'),
        Node(
            package='physinf_ros',
            executable='benchmark_node',
            name='benchmark',
            namespace=LaunchConfiguration('namespace'),
            output='screen',
            emulate_tty=True,
            parameters=[LaunchConfiguration('params_file'), overrides(ARGUMENTS)],
        ),
    ])

"""
Start benchmark_node with config/bench.yaml (params_file), then the parameters given as arguments.

Every benchmark parameter is a launch argument (`contexts:=2048`, `sessions:=3`); one not given
leaves params_file's value in place.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from physinf_ros.bench.params import BENCH_PARAMS
from physinf_ros.nodes.launch_args import declare, with_given


def benchmark(given):
    return [Node(
        package='physinf_ros',
        executable='benchmark_node',
        name='benchmark',
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        emulate_tty=True,
        parameters=[LaunchConfiguration('params_file')] + ([given] if given else []),
    )]


def generate_launch_description():
    defaults = os.path.join(get_package_share_directory('physinf_ros'), 'config', 'bench.yaml')
    return LaunchDescription(declare(BENCH_PARAMS) + [
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace for the benchmark node and its topics'),
        DeclareLaunchArgument('params_file', default_value=defaults,
                              description='YAML with the benchmark parameters'),
        with_given(BENCH_PARAMS, benchmark),
    ])

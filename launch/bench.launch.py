"""Start benchmark_node with config/bench.yaml, then the model/modes/contexts overrides."""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description():
    defaults = os.path.join(get_package_share_directory('physinf_ros'), 'config', 'bench.yaml')
    return LaunchDescription([
        DeclareLaunchArgument('model', default_value='embedded',
                              description='embedded, synthetic:ARCH, a .gguf file, a model '
                                          'directory or ORG/NAME'),
        DeclareLaunchArgument('modes', default_value='eager,graphed',
                              description='comma-separated backends; the first is the baseline'),
        DeclareLaunchArgument('contexts', default_value='2048,4096,8192,16384',
                              description='comma-separated context lengths'),
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
            # Typed as strings: a lone context such as 2048 must not arrive as an integer.
            parameters=[LaunchConfiguration('params_file'), {
                'model': ParameterValue(LaunchConfiguration('model'), value_type=str),
                'modes': ParameterValue(LaunchConfiguration('modes'), value_type=str),
                'contexts': ParameterValue(LaunchConfiguration('contexts'), value_type=str),
            }],
        ),
    ])

"""Start decoder_node with config/decoder.yaml, then the model/backend/autostart overrides."""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description():
    defaults = os.path.join(get_package_share_directory('physinf_ros'), 'config', 'decoder.yaml')
    return LaunchDescription([
        DeclareLaunchArgument('model', default_value='embedded',
                              description='embedded, a .gguf file, a model directory or ORG/NAME'),
        DeclareLaunchArgument('backend', default_value='auto',
                              description='decoding backend (auto picks the fastest here)'),
        DeclareLaunchArgument('autostart', default_value='true',
                              description='configure and activate the lifecycle node at start; '
                                          'false leaves it unconfigured for a lifecycle manager'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace for the decoder node and its topics'),
        DeclareLaunchArgument('params_file', default_value=defaults,
                              description='YAML with the decoder parameters'),
        Node(
            package='physinf_ros',
            executable='decoder_node',
            name='decoder',
            namespace=LaunchConfiguration('namespace'),
            output='screen',
            emulate_tty=True,
            parameters=[LaunchConfiguration('params_file'), {
                'model': LaunchConfiguration('model'),
                'backend': LaunchConfiguration('backend'),
                'autostart': ParameterValue(LaunchConfiguration('autostart'), value_type=bool),
            }],
        ),
    ])

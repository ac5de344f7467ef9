"""
Start decoder_node with config/decoder.yaml (params_file), then the parameters given as arguments.

Every decoder parameter is a launch argument (`max_new_tokens:=32`, `temperature:=0.7`); one
not given leaves params_file's value in place.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from physinf_ros.nodes.launch_args import declare, with_given
from physinf_ros.serving.params import AUTOSTART, DECODER_PARAMS

ARGUMENTS = DECODER_PARAMS + (AUTOSTART,)


def decoder(given):
    return [Node(
        package='physinf_ros',
        executable='decoder_node',
        name='decoder',
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        emulate_tty=True,
        parameters=[LaunchConfiguration('params_file')] + ([given] if given else []),
    )]


def generate_launch_description():
    defaults = os.path.join(get_package_share_directory('physinf_ros'), 'config', 'decoder.yaml')
    return LaunchDescription(declare(ARGUMENTS) + [
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace for the decoder node and its topics'),
        DeclareLaunchArgument('params_file', default_value=defaults,
                              description='YAML with the decoder parameters'),
        with_given(ARGUMENTS, decoder),
    ])

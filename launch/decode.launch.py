"""Start decoder_node with config/decoder.yaml, then the model/backend/autostart overrides."""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from physinf_ros.launch_args import declare, overrides
from physinf_ros.serving.params import AUTOSTART, PARAMS_BY_NAME

# The parameters a launch line may set; the rest come from params_file.
ARGUMENTS = (PARAMS_BY_NAME['model'], PARAMS_BY_NAME['backend'], AUTOSTART)


def generate_launch_description():
    defaults = os.path.join(get_package_share_directory('physinf_ros'), 'config', 'decoder.yaml')
    return LaunchDescription(declare(ARGUMENTS) + [
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
            parameters=[LaunchConfiguration('params_file'), overrides(ARGUMENTS)],
        ),
    ])

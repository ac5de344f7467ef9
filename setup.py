from glob import glob

from setuptools import find_packages, setup

package_name = 'physinf_ros'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    # The CUDA kernels' source, built on the GPU machine at first use (engine/kernels/q4_cuda.py,
    # engine/kernels/attention_cuda.py).
    package_data={'physinf_ros.engine.kernels': ['*.cu']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config', glob('config/*.yaml')),
    ],
    install_requires=['setuptools'],
    zip_safe=False,
    maintainer='physinf_ros maintainers',
    maintainer_email='maintainers@physinf-ros.example',
    description='Batch-1 LLM decoding for robots, streamed on ROS 2 topics and measured.',
    license='Apache-2.0',
    extras_require={'test': ['pytest']},
    entry_points={
        'console_scripts': [
            'decoder_node = physinf_ros.nodes.entry:decoder_node',
            'prompt_client = physinf_ros.nodes.entry:prompt_client',
            'physinf-generate = physinf_ros.cli:generate_main',
            'physinf-bench = physinf_ros.bench.cli:bench_main',
            'physinf-report = physinf_ros.bench.report:main',
            'physinf-attention = physinf_ros.bench.attention:main',
            'benchmark_node = physinf_ros.nodes.entry:benchmark_node',
        ],
    },
)

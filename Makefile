# Quick start: `make demo` (set up, then stream a reply from the embedded model over ROS 2)
# and `make test` (set up, then colcon build + colcon test).
.PHONY: setup demo test clean

setup:
	scripts/setup.sh

demo:
	scripts/demo.sh

test:
	scripts/test.sh

clean:
	rm -rf build install log

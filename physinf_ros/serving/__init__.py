"""
What decoder_node serves by, free of rclpy: its parameters, prompt admission, queue, one name.

params.py is the decoder's parameter table (names, defaults, ranges, checks; bench/params.py is
the benchmark node's); prompts.py admits a prompt before it is tokenised (size, invalid text,
controls, truncation); request_queue.py holds the request, the bounded queue and the ledger of
what became of each prompt; instances.py is the record each decoder publishes and the rule for
which of two decoders of one name gives way. nodes/ turns them into ROS 2 parameters, topics and
services.
"""

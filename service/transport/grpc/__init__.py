"""The gRPC servicers: each validates, converts (transport/convert.py) and calls the engine."""

"""gRPC: the handlers that wrap every method in the edge (handlers.py) and the servicers, each of
which validates, converts (transport/convert.py) and calls the engine — for every surface."""

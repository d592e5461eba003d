"""The gRPC binding: A2A 1.0 (`lf.a2a.v1.A2AService`) and 0.3 (`a2a.v1.A2AService`) over HTTP/2,
served by the same process and event loop as HTTP when A2A_GRPC_PORT is set (docs/protocol.md).

    protobuf request --MessageToDict--> 1.0 (or 0.3 REST) JSON params --> Operations (app.a2a)
    Operations' JSON result, or a journal entry's JSON --Parse--> protobuf response

The messages are the official a2a-sdk's generated code (`a2a.types.a2a_pb2`,
`a2a.compat.v0_3.a2a_v0_3_pb2`); the operations, limits, errors and journal are the HTTP
bindings' own, so a task is one task whichever binding made or reads it.
"""

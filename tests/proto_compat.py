"""Breaking-change comparison of two protobuf descriptor sets (released API vs. current protos).

Wire and generated-code compatibility for clients in every language: anything a released client
may rely on must still be there with the same number, type and shape. Additions (new messages,
fields, enum values, services, RPCs) are always allowed. Only files of our own package are
compared (imports such as google/protobuf/timestamp.proto are not ours to guard). An RPC's HTTP
route (its ``google.api.http`` option) is part of the API too: once released, it stays.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.api import annotations_pb2
from google.protobuf import descriptor_pb2

PACKAGE_PREFIX = "mnemosyne/"
_F = descriptor_pb2.FieldDescriptorProto


def compile_descriptor_set(proto_root: Path, out: Path) -> descriptor_pb2.FileDescriptorSet:
    """Compile every ``mnemosyne/v1/*.proto`` under ``proto_root`` with grpc_tools.protoc."""
    protos = sorted(str(p.relative_to(proto_root)) for p in (proto_root / "mnemosyne").rglob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"-I{proto_root / 'third_party'}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            *protos,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return load_descriptor_set(out)


def load_descriptor_set(path: Path) -> descriptor_pb2.FileDescriptorSet:
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(Path(path).read_bytes())
    return fds


def _messages(prefix: str, messages) -> dict[str, descriptor_pb2.DescriptorProto]:
    found = {}
    for message in messages:
        name = f"{prefix}.{message.name}"
        found[name] = message
        found.update(_messages(name, message.nested_type))
    return found


def _enums(prefix: str, file_or_message) -> dict[str, descriptor_pb2.EnumDescriptorProto]:
    found = {f"{prefix}.{e.name}": e for e in file_or_message.enum_type}
    nested = file_or_message.message_type if hasattr(file_or_message, "message_type") else file_or_message.nested_type
    for message in nested:
        found.update(_enums(f"{prefix}.{message.name}", message))
    return found


def _index(fds: descriptor_pb2.FileDescriptorSet):
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    enums: dict[str, descriptor_pb2.EnumDescriptorProto] = {}
    services: dict[str, descriptor_pb2.ServiceDescriptorProto] = {}
    for file in fds.file:
        if not file.name.startswith(PACKAGE_PREFIX):
            continue
        prefix = f".{file.package}" if file.package else ""
        messages.update(_messages(prefix, file.message_type))
        enums.update(_enums(prefix, file))
        services.update({f"{prefix}.{s.name}": s for s in file.service})
    return messages, enums, services


def _field_shape(field: descriptor_pb2.FieldDescriptorProto) -> tuple[str, str, str, bool]:
    # proto3 `optional` lives in a synthetic oneof: moving a field in or out of a real oneof
    # changes generated code, so oneof membership (other than synthetic) is part of the shape.
    in_real_oneof = field.HasField("oneof_index") and not field.proto3_optional
    return (_F.Type.Name(field.type), field.type_name, _F.Label.Name(field.label), in_real_oneof)


def breaking_changes(
    released: descriptor_pb2.FileDescriptorSet, current: descriptor_pb2.FileDescriptorSet
) -> list[str]:
    """Every way ``current`` breaks clients of ``released``, as human-readable lines."""
    old_messages, old_enums, old_services = _index(released)
    new_messages, new_enums, new_services = _index(current)
    problems: list[str] = []

    for name, old in old_messages.items():
        new = new_messages.get(name)
        if new is None:
            problems.append(f"message {name} was removed")
            continue
        new_fields = {f.number: f for f in new.field}
        for field in old.field:
            now = new_fields.get(field.number)
            if now is None:
                by_name = [f for f in new.field if f.name == field.name]
                moved = f" (now number {by_name[0].number})" if by_name else ""
                problems.append(f"field {name}.{field.name} = {field.number} was removed{moved}")
                continue
            if now.name != field.name:
                problems.append(f"field {name} number {field.number} was renamed {field.name} -> {now.name}")
            if _field_shape(now) != _field_shape(field):
                problems.append(
                    f"field {name}.{field.name} = {field.number} changed type/label "
                    f"{_field_shape(field)} -> {_field_shape(now)}"
                )

    for name, old in old_enums.items():
        new = new_enums.get(name)
        if new is None:
            problems.append(f"enum {name} was removed")
            continue
        new_values = {v.name: v.number for v in new.value}
        for value in old.value:
            if value.name not in new_values:
                problems.append(f"enum value {name}.{value.name} = {value.number} was removed")
            elif new_values[value.name] != value.number:
                problems.append(
                    f"enum value {name}.{value.name} changed number {value.number} -> {new_values[value.name]}"
                )

    for name, old in old_services.items():
        new = new_services.get(name)
        if new is None:
            problems.append(f"service {name} was removed")
            continue
        new_methods = {m.name: m for m in new.method}
        for method in old.method:
            now = new_methods.get(method.name)
            if now is None:
                problems.append(f"rpc {name}.{method.name} was removed")
                continue
            old_sig = (method.input_type, method.output_type, method.client_streaming, method.server_streaming)
            new_sig = (now.input_type, now.output_type, now.client_streaming, now.server_streaming)
            if old_sig != new_sig:
                problems.append(f"rpc {name}.{method.name} changed signature {old_sig} -> {new_sig}")
            old_route, new_route = _http_route(method), _http_route(now)
            if old_route is not None and old_route != new_route:
                problems.append(f"rpc {name}.{method.name} changed its HTTP route {old_route} -> {new_route}")
    return problems


def _http_route(method: descriptor_pb2.MethodDescriptorProto) -> str | None:
    """The RPC's google.api.http rule in text form, None without one."""
    if not method.options.HasExtension(annotations_pb2.http):
        return None
    return str(method.options.Extensions[annotations_pb2.http]).replace("\n", " ").strip()

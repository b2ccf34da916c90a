"""The payload codec: msgpack with exact round trips and errors that say what and where.

Workflow arguments, results, signals and activity payloads are persisted and
replayed, so a value must come back as the *same* value of the *same* type (a
tuple stays a tuple, an aware datetime keeps its zone, a 100-bit int stays
exact); and a value that cannot be stored must fail when it is written, with an
error naming the offending type and where it came from (the caller's label plus
the path inside the value), not as a bare ``TypeError`` from deep inside msgpack
or as a surprise during replay.

Types outside msgpack's own model travel as extension types; ``_wire`` lists their
codes and payload layouts.

Deliberate approximations: subclasses of dict, list, str, bytes, int, float,
set, tuple, datetime, Decimal and UUID that are not enums, dataclasses, pydantic
models or named tuples are written as their base type (an ``OrderedDict`` or
``defaultdict`` decodes as a plain ``dict``); ``bytearray`` and ``memoryview``
are packed by msgpack before the codec sees them and decode as ``bytes``; a
``tzinfo`` that is neither a ``ZoneInfo`` with a key nor a ``datetime.timezone``
is written as the fixed offset (and name) it has at that instant.  Classes travel
as (module, qualname) tags; decoding constructs only classes registered in this process
(``register_type``, or encoded here), and never imports a module a payload names.

Threading: ``encode``/``decode`` keep their msgpack packers per thread (activities
may run in a thread pool).  ``pack_record`` shares one module-level packer and
must only be called from the engine's event-loop thread.
"""

from ._pack import encode, encode_args
from ._plain import OPAQUE, decode_plain
from ._records import pack_record, unpack_record
from ._unpack import count_args, decode, decode_args, try_decode, try_decode_args
from ._wire import register_type

__all__ = [
    "encode",
    "decode",
    "pack_record",
    "unpack_record",
    "encode_args",
    "decode_args",
    "count_args",
    "try_decode",
    "try_decode_args",
    "register_type",
    "decode_plain",
    "OPAQUE",
]

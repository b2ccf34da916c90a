"""Tests for weft_actors.codec: exact round trips, precise errors, depth guards."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import math
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections import OrderedDict, defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft_actors.codec import (
    decode,
    decode_args,
    encode,
    encode_args,
    pack_record,
    unpack_record,
)
from weft_actors.codec import register_type
from weft_actors.errors import SerializationError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --------------------------------------------------------------------------- module-level types
# (defined here, at module level, so their (module, qualname) tags lead back to them)


class Color(enum.Enum):
    RED = "red"
    GREEN = ("g", 2)


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mode(str, enum.Enum):
    READ = "r"
    WRITE = "w"


class Perm(enum.IntFlag):
    R = 4
    W = 2
    X = 1


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: float


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    points: tuple[Point, ...]
    tags: frozenset[str] = frozenset()
    origin: Point | None = None


@dataclasses.dataclass
class Counter:
    name: str
    count: int = dataclasses.field(init=False, default=0)
    cache: dict = dataclasses.field(init=False)  # never set: must stay unset


@dataclasses.dataclass(frozen=True, slots=True)
class Slotted:
    a: int
    b: tuple[int, ...]


class Pair(NamedTuple):
    left: Any
    right: Any


class FakeModel:
    """Duck-typed stand-in for a pydantic v2 model (pydantic is not imported)."""

    def __init__(self, name: str, when: dt.datetime, tags: tuple[str, ...]) -> None:
        self.name = name
        self.when = when
        self.tags = tags

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        assert mode == "python"
        return {"name": self.name, "when": self.when, "tags": self.tags}

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> FakeModel:
        return cls(**data)

    def __eq__(self, other: object) -> bool:
        return type(other) is FakeModel and vars(self) == vars(other)


class BrokenModel(FakeModel):
    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        raise RuntimeError("boom")


class OddZone(dt.tzinfo):
    """A tzinfo that is neither ZoneInfo nor datetime.timezone."""

    def utcoffset(self, when: object) -> dt.timedelta:
        return dt.timedelta(hours=3, minutes=15)

    def tzname(self, when: object) -> str:
        return "ODD"

    def dst(self, when: object) -> dt.timedelta:
        return dt.timedelta(0)


class NoOffsetZone(dt.tzinfo):
    def utcoffset(self, when: object) -> None:
        return None


# --------------------------------------------------------------------------- exact comparison


def _same_tz(a: dt.tzinfo | None, b: dt.tzinfo | None) -> None:
    if a is None or b is None:
        assert a is None and b is None, (a, b)
        return
    if isinstance(a, ZoneInfo):
        assert type(b) is ZoneInfo and b.key == a.key, (a, b)
    elif type(a) is dt.timezone:
        assert type(b) is dt.timezone, (a, b)
        assert a.utcoffset(None) == b.utcoffset(None) and a.tzname(None) == b.tzname(None)


def _same(a: Any, b: Any) -> None:
    """Assert ``b`` equals ``a`` with exactly the same types, recursively."""
    assert type(a) is type(b), (type(a), type(b), a, b)
    t = type(a)
    if t is float:
        if math.isnan(a):
            assert math.isnan(b)
        else:
            assert a == b and math.copysign(1.0, a) == math.copysign(1.0, b), (a, b)
    elif t is decimal.Decimal:
        assert str(a) == str(b), (a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert len(a) == len(b), (a, b)
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            _same(ka, kb)
            _same(va, vb)
    elif isinstance(a, (set, frozenset)):
        assert len(a) == len(b), (a, b)
        for x in a:
            matches = [y for y in b if y == x]
            assert len(matches) == 1, (x, b)
            _same(x, matches[0])
    elif t is dt.datetime:
        assert a == b, (a, b)
        assert a.replace(tzinfo=None) == b.replace(tzinfo=None)  # same wall time
        assert a.fold == b.fold and a.utcoffset() == b.utcoffset() and a.tzname() == b.tzname()
        _same_tz(a.tzinfo, b.tzinfo)
    elif t is dt.time:
        assert a.replace(tzinfo=None) == b.replace(tzinfo=None) and a.fold == b.fold
        _same_tz(a.tzinfo, b.tzinfo)
    elif isinstance(a, enum.Enum):
        assert a is b, (a, b)
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            missing = object()
            x, y = getattr(a, f.name, missing), getattr(b, f.name, missing)
            if x is missing or y is missing:
                assert x is y, (f.name, a, b)  # unset on both sides
            else:
                _same(x, y)
    else:
        assert a == b, (a, b)


def roundtrip(value: Any) -> Any:
    data = encode(value)
    assert type(data) is bytes
    out = decode(data)
    _same(value, out)
    return out


# --------------------------------------------------------------------------- strategies

FIXED_ZONES = [
    dt.timezone.utc,
    dt.timezone(dt.timedelta(hours=5, minutes=30)),
    dt.timezone(-dt.timedelta(hours=8), "PST"),
    dt.timezone(dt.timedelta(seconds=-3601, microseconds=5)),
]
ZONES = [ZoneInfo("Europe/Paris"), ZoneInfo("America/New_York")]

big_ints = st.integers(min_value=2**64, max_value=2**300) | st.integers(
    min_value=-(2**300), max_value=-(2**63) - 1
)
ints = st.integers() | big_ints | st.sampled_from([2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1])
aware_datetimes = st.datetimes(timezones=st.sampled_from(FIXED_ZONES + ZONES))
times = st.times(timezones=st.none() | st.sampled_from(FIXED_ZONES + ZONES))
members = st.sampled_from([*Color, *Level, *Mode, *Perm])
points = st.builds(Point, st.integers(), st.floats(allow_nan=False))

hashable_leaves = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.datetimes(),
    aware_datetimes,
    st.dates(),
    times,
    st.timedeltas(),
    st.decimals(allow_nan=False),
    st.uuids(),
    members,
    points,
)

hashables = st.recursive(
    hashable_leaves,
    lambda inner: st.lists(inner, max_size=3).map(tuple) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)

values = st.recursive(
    hashable_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(hashables, inner, max_size=4),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
        st.builds(Pair, inner, inner),
    ),
    max_leaves=25,
)

SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


# --------------------------------------------------------------------------- round trips


@SETTINGS
@given(values)
def test_roundtrip_exact(value: Any) -> None:
    roundtrip(value)


@SETTINGS
@given(st.lists(values, max_size=4).map(tuple))
def test_args_roundtrip_exact(args: tuple) -> None:
    out = decode_args(encode_args(args))
    _same(args, out)


def test_nan() -> None:
    out = roundtrip(float("nan"))
    assert math.isnan(out)
    roundtrip([float("nan"), (float("-nan"), {"k": float("nan")})])
    for text in ("NaN", "-NaN", "sNaN", "NaN123", "Infinity", "-0", "1.500E+7"):
        out = roundtrip(decimal.Decimal(text))
        assert str(out) == text if text != "-NaN" else str(out) == "-NaN"


@pytest.mark.parametrize(
    "value",
    [0, 1, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 2**200, -(2**200), 10**400],
)
def test_ints_any_size(value: int) -> None:
    roundtrip(value)
    roundtrip({value: [value]})


def test_scalars_keep_their_types() -> None:
    for value in (None, True, False, 0, 1.0, -0.0, float("inf"), float("-inf"), "", "x", b"", b"x"):
        roundtrip(value)
    assert type(decode(encode(True))) is bool
    assert type(decode(encode(b"abc"))) is bytes
    assert type(decode(encode("abc"))) is str


def test_containers_keep_their_types() -> None:
    roundtrip(((), (1,), ((2, 3), [4, (5,)])))
    roundtrip({(1, "a"): 1, 2: "b", frozenset({3}): [()], None: {}, (): set(), Level.LOW: 0})
    roundtrip([set(), frozenset(), {1, "a", (2, 3)}, frozenset({frozenset({1})})])
    out = decode(encode({(1, (2, 3)): "x"}))
    assert list(out) == [(1, (2, 3))]  # tuple keys decode hashable, never as lists


def test_datetimes() -> None:
    paris = ZoneInfo("Europe/Paris")
    new_york = ZoneInfo("America/New_York")
    values = [
        dt.datetime(2024, 1, 2, 3, 4, 5, 678901),
        dt.datetime(2024, 7, 1, 12, tzinfo=paris),
        dt.datetime(2023, 11, 5, 1, 30, tzinfo=new_york, fold=0),
        dt.datetime(2023, 11, 5, 1, 30, tzinfo=new_york, fold=1),  # ambiguous hour
        dt.datetime(2024, 3, 10, 2, 30, tzinfo=new_york),  # imaginary hour
        dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-8), "PST")),
        dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(seconds=59, microseconds=1))),
        dt.datetime.min,
        dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-23, minutes=-59))),
    ]
    for value in values:
        out = roundtrip(value)
        assert out.utcoffset() == value.utcoffset()
    assert decode(encode(values[1])).tzinfo is paris  # ZoneInfo cache: same object
    assert decode(encode(values[5])).tzinfo is dt.timezone.utc
    assert decode(encode(values[6])).tzname() == "PST"


def test_other_tzinfo_becomes_fixed_offset() -> None:
    value = dt.datetime(2024, 5, 6, 7, 8, tzinfo=OddZone())
    out = decode(encode(value))
    assert out == value and out.utcoffset() == value.utcoffset() and out.tzname() == "ODD"
    assert type(out.tzinfo) is dt.timezone
    with pytest.raises(SerializationError) as info:
        encode(dt.datetime(2024, 1, 1, tzinfo=NoOffsetZone()), "signal payload")
    assert info.value.type_name == "datetime.datetime"
    assert "NoOffsetZone" in str(info.value)


def test_dates_times_timedeltas_decimals_uuids() -> None:
    for value in (
        dt.date(1, 1, 1),
        dt.date(9999, 12, 31),
        dt.time(23, 59, 59, 999999),
        dt.time(1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        dt.time(1, 2, fold=1),
        dt.timedelta(days=-3, seconds=5, microseconds=7),
        dt.timedelta.max,
        dt.timedelta.min,
        decimal.Decimal("-0.000100"),
        uuid.UUID(int=0),
        uuid.uuid4(),
    ):
        roundtrip(value)


def test_dataclasses() -> None:
    shape = Shape(
        "tri",
        (Point(0, 0.0), Point(1, -2.5), Point(2**70, float("inf"))),
        frozenset({"a", "b"}),
        Point(-1, 1e-300),
    )
    out = roundtrip(shape)
    assert out == shape and hash(out) == hash(shape)
    assert type(out.points) is tuple and type(out.points[0]) is Point
    roundtrip({shape: [shape, (shape,)]})  # frozen dataclass as a dict key
    roundtrip(Slotted(1, (2, 3)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.name = "changed"  # still a genuine frozen instance


def test_dataclass_init_false_fields() -> None:
    counter = Counter("c")
    counter.count = 5
    out = roundtrip(counter)
    assert out.count == 5
    assert not hasattr(out, "cache")
    counter.cache = {"k": (1,)}
    assert roundtrip(counter).cache == {"k": (1,)}


def test_enums() -> None:
    for member in (*Color, *Level, *Mode, *Perm, Perm.R | Perm.W):
        out = roundtrip(member)
        assert out is member
    roundtrip({Mode.READ: Level.HIGH, Color.GREEN: [Color.RED]})
    assert type(decode(encode(Level.LOW))) is Level  # an IntEnum does not decay to int


def test_named_tuples_and_duck_typed_models() -> None:
    out = roundtrip(Pair(1, (2, Pair("a", b"b"))))
    assert out.left == 1 and type(out.right[1]) is Pair
    model = FakeModel("m", dt.datetime(2024, 1, 1, tzinfo=ZoneInfo("Europe/Paris")), ("a", "b"))
    out = decode(encode([model]))[0]
    assert type(out) is FakeModel and out == model
    _same(model.when, out.when)
    assert type(out.tags) is tuple


def test_subclasses_decode_as_their_base() -> None:
    ordered = OrderedDict([("b", 1), ("a", (2,))])
    out = decode(encode(ordered))
    assert type(out) is dict and list(out.items()) == [("b", 1), ("a", (2,))]
    counts: defaultdict[str, int] = defaultdict(int, {"x": 3})
    assert decode(encode(counts)) == {"x": 3} and type(decode(encode(counts))) is dict
    out = decode(encode(bytearray(b"\x00\x01")))
    assert out == b"\x00\x01" and type(out) is bytes

    class Name(str):
        pass

    class Big(int):
        pass

    assert type(decode(encode(Name("n")))) is str
    assert decode(encode(Big(2**80))) == 2**80


def test_set_encoding_does_not_depend_on_order_or_hash_seed() -> None:
    items = [f"item-{i}" for i in range(40)]
    assert encode(set(items)) == encode(set(reversed(items)))
    code = (
        "import sys; from weft_actors.codec import encode;"
        "sys.stdout.write(encode(frozenset(f'item-{i}' for i in range(40))).hex())"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=ROOT)
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30
        )
        assert result.returncode == 0, result.stderr
        outputs.add(result.stdout)
    assert len(outputs) == 1


# --------------------------------------------------------------------------- errors


def _encode_error(value: Any, where: str = "workflow argument") -> SerializationError:
    with pytest.raises(SerializationError) as info:
        encode(value, where)
    return info.value


@pytest.mark.parametrize(
    ("factory", "type_name"),
    [
        (object, "object"),
        (lambda: (lambda: 1), "function"),
        (lambda: threading.Lock(), "_thread.lock"),
        (lambda: Point, "type"),  # a class is not a value
    ],
)
def test_unencodable_values(factory: Any, type_name: str) -> None:
    error = _encode_error(factory())
    assert error.type_name == type_name
    assert error.where == "workflow argument"
    assert repr(type_name) in str(error) and "workflow argument" in str(error)


def test_unencodable_socket_deep_inside_a_dict() -> None:
    with socket.socket() as sock:
        error = _encode_error(sock)
        assert error.type_name == "socket.socket" and error.path is None
        assert str(error) == (
            "cannot encode a value of type 'socket.socket' (workflow argument): unsupported type"
        )
        error = _encode_error({"a": [1, {"b": (2, {"c": sock})}]}, "activity result")
    assert error.type_name == "socket.socket"
    assert error.where == "activity result"
    assert error.path == "['a'][1]['b'][1]['c']"
    assert "'socket.socket'" in str(error) and "activity result" in str(error)
    assert "['a'][1]['b'][1]['c']" in str(error)


def test_unencodable_inside_dataclass_set_and_key() -> None:
    error = _encode_error(Shape("s", (Point(1, 2.0),), origin=object()))  # type: ignore[arg-type]
    assert error.type_name == "object" and error.path == ".origin"
    error = _encode_error({object(): 1})
    assert error.type_name == "object" and error.path is not None and "<key" in error.path


def test_classes_that_cannot_be_imported_fail_on_encode() -> None:
    @dataclasses.dataclass
    class Local:
        x: int

    error = _encode_error([Local(1)])
    assert error.type_name.endswith("<locals>.Local")
    assert "inside a function" in str(error)


def test_errors_from_user_code_are_wrapped() -> None:
    error = _encode_error({"m": BrokenModel("m", dt.datetime(2024, 1, 1), ())})
    assert error.type_name == f"{__name__}.BrokenModel"
    assert "RuntimeError: boom" in str(error) and error.path == "['m']"
    assert isinstance(error.__cause__, RuntimeError)


def test_args_errors_and_shape() -> None:
    with pytest.raises(SerializationError) as info:
        encode_args((1, object(), 3))
    assert info.value.where == "workflow argument" and info.value.path == "[1]"
    assert info.value.type_name == "object"
    with pytest.raises(SerializationError):
        decode_args(encode(5))
    with pytest.raises(SerializationError):
        encode_args(42)  # type: ignore[arg-type]
    assert decode_args(encode_args(())) == ()
    out = decode_args(encode_args((1, "a", (2, 3), {"k": frozenset({1})})))
    _same((1, "a", (2, 3), {"k": frozenset({1})}), out)


def _ext(code: int, payload: Any) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, msgpack.packb(payload)))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        b"\x92\x01",
        b"\x01\x02",
        b"\xd4\x63\x00",  # unknown extension code
        b"\xc7\x01\x02\xc1",  # tuple with a corrupt payload
        _ext(5, [2024, 1, 1]),  # datetime, wrong arity
        _ext(5, [2024, 13, 1, 0, 0, 0, 0, 0, None]),  # month 13
        _ext(5, [2024, 1, 1, 0, 0, 0, 0, 0, "No/Such_Zone"]),
        _ext(5, [2024, 1, 1, 0, 0, 0, 0, 0, [86400 * 10**6, None]]),  # offset out of range
        _ext(2, "abc"),  # a tuple whose payload is not an array
        _ext(11, [__name__, "Color", "no-such-value"]),
        _ext(11, [__name__, "Point", 1]),  # not an Enum
        _ext(12, [__name__, "Color", {}]),  # not a dataclass
        _ext(12, [__name__, "Point", {"z": 1}]),  # unknown field
        msgpack.packb(msgpack.ExtType(6, b"\x00")),  # date, short payload
        msgpack.packb(msgpack.ExtType(10, b"\x00" * 3)),  # uuid, short payload
        "not bytes",
        None,
    ],
)
def test_corrupt_input_raises_serialization_error(data: Any) -> None:
    with pytest.raises(SerializationError) as info:
        decode(data, "history event")
    assert info.value.where == "history event"
    assert "history event" in str(info.value)


def test_missing_class_on_decode_is_named() -> None:
    with pytest.raises(SerializationError) as info:
        decode(_ext(12, ["no_such_module_xyz", "Thing", {}]), "workflow result")
    error = info.value
    assert error.type_name == "no_such_module_xyz.Thing" and error.where == "workflow result"
    assert "no_such_module_xyz.Thing" in str(error) and "workflow result" in str(error)
    with pytest.raises(SerializationError) as info:
        decode(_ext(12, [__name__, "Gone", {}]))
    assert info.value.type_name == f"{__name__}.Gone"


# --------------------------------------------------------------------------- the type registry


@dataclasses.dataclass
class NeverEncoded:
    """Loaded in this process, but never encoded nor registered: decoding must not build it."""

    x: int


class Flavour(enum.Enum):
    SWEET = "sweet"


def _in_fresh_interpreter(code: str, *paths: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *paths]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30)


def test_decoding_never_imports_the_module_a_payload_names(tmp_path) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "noisy_module_xyz.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class Thing:\n    x: int = 0\n"
    )
    code = (
        "import sys, msgpack\n"
        "from weft_actors.codec import decode\n"
        "from weft_actors.errors import SerializationError\n"
        "for module, name in [('noisy_module_xyz', 'Thing'), ('unittest.__main__', 'main')]:\n"
        "    data = msgpack.packb(msgpack.ExtType(12, msgpack.packb([module, name, {}])))\n"
        "    try:\n"
        "        decode(data, 'signal payload')\n"
        "    except SerializationError as exc:\n"
        "        assert 'not registered' in str(exc), exc\n"
        "    else:\n"
        "        raise SystemExit('decoded ' + module)\n"
        "    assert module not in sys.modules, module\n"
        "print('alive')\n"
    )
    result = _in_fresh_interpreter(code, str(tmp_path))
    assert result.returncode == 0 and result.stdout.strip() == "alive", result.stdout + result.stderr
    assert not marker.exists()


def test_a_loaded_but_unregistered_class_is_not_constructed() -> None:
    for code, payload in ((12, [__name__, "NeverEncoded", {"x": 1}]), (11, [__name__, "Flavour", "sweet"])):
        with pytest.raises(SerializationError) as info:
            decode(_ext(code, payload), "signal payload")
        assert "not registered" in str(info.value) and "register_type" in str(info.value)
    register_type(Flavour)
    assert decode(_ext(11, [__name__, "Flavour", "sweet"])) is Flavour.SWEET


def test_register_type_takes_classes_and_modules_and_refuses_the_rest(tmp_path) -> None:
    assert register_type(NeverEncoded) is NeverEncoded  # usable as a decorator
    assert decode(_ext(12, [__name__, "NeverEncoded", {"x": 2}])) == NeverEncoded(2)
    with pytest.raises(TypeError):
        register_type(object)
    with pytest.raises(TypeError):
        register_type(42)

    @dataclasses.dataclass
    class Local:
        x: int

    with pytest.raises(TypeError, match="inside a function"):
        register_type(Local)
    (tmp_path / "types_app_xyz.py").write_text(
        "import dataclasses, enum\n"
        "from typing import NamedTuple\n"
        "@dataclasses.dataclass\n"
        "class Order:\n    n: int\n"
        "class Size(enum.Enum):\n    BIG = 'big'\n"
        "class Pt(NamedTuple):\n    a: int\n"
    )
    code = (
        "import msgpack, types_app_xyz as app\n"
        "from weft_actors import register_type\n"
        "from weft_actors.codec import decode\n"
        "register_type(app)\n"
        "ext = lambda c, p: msgpack.packb(msgpack.ExtType(c, msgpack.packb(p)))\n"
        "assert decode(ext(12, ['types_app_xyz', 'Order', {'n': 1}])) == app.Order(1)\n"
        "assert decode(ext(11, ['types_app_xyz', 'Size', 'big'])) is app.Size.BIG\n"
        "assert decode(ext(14, ['types_app_xyz', 'Pt', [3]])) == app.Pt(3)\n"
        "print('ok')\n"
    )
    result = _in_fresh_interpreter(code, str(tmp_path))
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_collecting_an_app_registers_the_types_its_payloads_carry(tmp_path) -> None:
    """A shard decodes what clients encoded elsewhere: the app's types are registered when the
    engine collects its workflows, from the module and from the workflows' annotations."""
    (tmp_path / "models_xyz.py").write_text(
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class Item:\n    sku: str\n"
        "@dataclasses.dataclass\n"
        "class Annotated:\n    v: int\n"
    )
    (tmp_path / "acts_xyz.py").write_text(
        "import dataclasses\n"
        "from weft_actors import activity\n"
        "@dataclasses.dataclass\n"
        "class Fetched:\n    body: str\n"
        "@activity\n"
        "async def fetch(url: str) -> 'Fetched':\n    return Fetched(url)\n"
    )
    (tmp_path / "shop_app_xyz.py").write_text(
        "import dataclasses\n"
        "from weft_actors import workflow\n"
        "from models_xyz import Item\n"
        "import models_xyz\n"
        "from acts_xyz import fetch\n"
        "@dataclasses.dataclass\n"
        "class Order:\n    n: int\n"
        "@workflow\n"
        "async def shop(ctx, order: Order, extra: 'list[models_xyz.Annotated] | None' = None) -> Order:\n"
        "    return order\n"
    )
    code = (
        "import msgpack, shop_app_xyz as app, models_xyz\n"
        "from weft_actors.codec import decode\n"
        "from weft_actors.workflow import collect_workflows\n"
        "ext = lambda c, p: msgpack.packb(msgpack.ExtType(c, msgpack.packb(p)))\n"
        "collect_workflows([app.shop])\n"
        "assert decode(ext(12, ['shop_app_xyz', 'Order', {'n': 1}])) == app.Order(1)\n"
        "assert decode(ext(12, ['models_xyz', 'Item', {'sku': 'a'}])) == models_xyz.Item('a')\n"
        "assert decode(ext(12, ['models_xyz', 'Annotated', {'v': 2}])) == models_xyz.Annotated(2)\n"
        "assert decode(ext(12, ['acts_xyz', 'Fetched', {'body': 'b'}])).body == 'b'\n"
        "print('ok')\n"
    )
    result = _in_fresh_interpreter(code, str(tmp_path))
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    try:
        decode(data)
    except SerializationError:
        pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.integers(min_value=0), st.integers(min_value=0, max_value=255))
def test_mutated_encodings_never_raise_anything_else(value: Any, index: int, byte: int) -> None:
    data = bytearray(encode(value))
    data[index % len(data)] = byte
    try:
        decode(bytes(data))
    except SerializationError:
        pass


# --------------------------------------------------------------------------- depth guards


def _nested_lists(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _nested_tuples(depth: int) -> tuple:
    value: tuple = ()
    for _ in range(depth):
        value = (value,)
    return value


def test_deep_nesting_raises_serialization_error() -> None:
    for value in (_nested_lists(100_000), _nested_tuples(10_000), [_nested_tuples(5_000)]):
        error = _encode_error(value, "value")
        assert "nested too deeply" in str(error)
    nested_dict: dict = {}
    for _ in range(5_000):
        nested_dict = {"k": nested_dict}
    _encode_error(nested_dict)
    with pytest.raises(SerializationError):
        decode(b"\x91" * 100_000 + b"\xc0")


def test_cycles_raise_serialization_error() -> None:
    cycle: list = []
    cycle.append(cycle)
    _encode_error(cycle)
    through_tuple: list = []
    through_tuple.append((through_tuple,))
    _encode_error(through_tuple)


def test_every_encodable_depth_decodes() -> None:
    depth = 1
    while depth < 1_000:
        try:
            encode(_nested_tuples(depth + 1))
        except SerializationError:
            break
        depth += 1
    assert 50 <= depth < 1_000  # plenty for real data, and bounded
    roundtrip(_nested_tuples(depth))  # depth + 1 tuples, counting the innermost ()
    # the same shape built by hand decodes; one tuple more is refused, like encode
    data = msgpack.packb(msgpack.ExtType(2, b"\x90"))
    for _ in range(depth):
        data = msgpack.packb(msgpack.ExtType(2, b"\x91" + data))
    _same(_nested_tuples(depth), decode(data))
    data = msgpack.packb(msgpack.ExtType(2, b"\x91" + data))
    with pytest.raises(SerializationError) as info:
        decode(data)
    assert "nested too deeply" in str(info.value)


def test_deep_lists_inside_nested_tuples_fail_cleanly() -> None:
    # Every extension payload restarts msgpack's own list-depth limit; without a
    # guard this overflows the C stack (a segfault), so run it in a subprocess.
    code = """
import threading
from weft_actors.codec import encode
from weft_actors.errors import SerializationError
value = 0
for _ in range(40):
    inner = value
    for _ in range(1_000):
        inner = [inner]
    value = (inner,)
def run():
    try:
        encode(value)
    except SerializationError as error:
        print("ok", "nested too deeply" in str(error))
thread = threading.Thread(target=run)
thread.start()
thread.join()
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=50,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.strip() == "ok True"


# --------------------------------------------------------------------------- records and threads


def test_pack_record_roundtrip() -> None:
    record = {
        "kind": "activity_completed",
        "seq": 42,
        "ts": 1.5,
        "payload": b"\x00\xff",
        "ok": True,
        "error": None,
        "attempts": [1, 2, 3],
        "meta": {"shard": 3, 7: "int key"},
        "big": 2**64 - 1,
        "neg": -(2**63),
    }
    data = pack_record(record)
    assert type(data) is bytes
    out = unpack_record(data)
    _same(record, out)
    assert unpack_record(pack_record([])) == []


def test_encode_is_thread_safe() -> None:
    value = {
        "when": dt.datetime(2024, 1, 1, tzinfo=ZoneInfo("Europe/Paris")),
        "ids": (uuid.UUID(int=7), Level.HIGH),
        "tags": frozenset({"a", "b", "c"}),
        "shape": Shape("s", (Point(1, 2.0),)),
        "n": 2**100,
    }
    expected = encode(value)

    def work(_: int) -> bool:
        return all(encode(value) == expected and decode(expected) == value for _ in range(200))

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(work, range(16)))

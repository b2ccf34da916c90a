"""The bus: wire protocol, front door, hint pub/sub, and the clients."""

from ._access import READ_OPS, KeyRing
from ._async_client import AsyncClient, AsyncClientHandle
from ._client import DEFAULT_ENDPOINT, Client, ClientHandle
from ._curve import load_key
from ._dispatch import START_OPS, shard_identity
from ._frontdoor import FrontDoor
from ._many import Landed
from ._hints import HINT_KINDS, HintProxy, decode_hint, encode_hint, hint_topic, publisher, subscriber
from ._protocol import (
    DEFAULT_MAX_FRAME,
    OPS,
    VERSION,
    decode_reply,
    decode_request,
    encode_error,
    encode_reply,
    encode_request,
)
from ._routing import RoutingTable

__all__ = [
    "START_OPS",
    "KeyRing",
    "READ_OPS",
    "AsyncClient",
    "AsyncClientHandle",
    "Client",
    "ClientHandle",
    "Landed",
    "DEFAULT_ENDPOINT",
    "load_key",
    "DEFAULT_MAX_FRAME",
    "FrontDoor",
    "HINT_KINDS",
    "HintProxy",
    "OPS",
    "RoutingTable",
    "VERSION",
    "decode_hint",
    "decode_reply",
    "decode_request",
    "encode_error",
    "encode_hint",
    "hint_topic",
    "encode_reply",
    "encode_request",
    "publisher",
    "shard_identity",
    "subscriber",
]

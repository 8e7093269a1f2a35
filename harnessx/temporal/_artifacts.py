"""Large payloads kept outside Temporal's history, in an artifact store.

Temporal refuses payloads over 2 MB and slows down long before that; a long conversation
travels with every model activity. With ``artifact_store=`` the client's and the workers'
data converter writes each payload above ``threshold`` bytes to the store and puts only
its key in the history. The store is any object with ``put_artifact(bytes) -> str`` and
``get_artifact(str) -> bytes`` (async), shared by the clients and the workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, PayloadCodec

__all__ = ["ArtifactCodec", "ArtifactStore", "data_converter"]

_ENCODING = b"binary/harnessx-artifact-v1"


class ArtifactStore(Protocol):
    async def put_artifact(self, data: bytes) -> str: ...

    async def get_artifact(self, key: str) -> bytes: ...


class ArtifactCodec(PayloadCodec):
    def __init__(self, store: ArtifactStore, threshold: int = 256 * 1024) -> None:
        self.store = store
        self.threshold = threshold

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        encoded = []
        for payload in payloads:
            raw = payload.SerializeToString()
            if len(raw) <= self.threshold:
                encoded.append(payload)
                continue
            key = await self.store.put_artifact(raw)
            encoded.append(Payload(metadata={"encoding": _ENCODING}, data=key.encode()))
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") == _ENCODING:
                decoded.append(Payload.FromString(await self.store.get_artifact(payload.data.decode())))
            else:
                decoded.append(payload)
        return decoded


def data_converter(store: ArtifactStore | None) -> DataConverter:
    """Temporal's default converter, offloading large payloads to ``store`` when given."""
    if store is None:
        return DataConverter.default
    return dataclasses.replace(DataConverter.default, payload_codec=ArtifactCodec(store))

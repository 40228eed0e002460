"""Chunking of blobs and deduplication in the local chunk store."""

import hashlib
import os

import pytest

from corral_image_service.chunks.store import LocalChunkStore, chunk_blob

CS = 8192


def _blob(tmp_path, name: str, data: bytes) -> tuple[str, str]:
    path = tmp_path / name
    path.write_bytes(data)
    return "sha256:" + hashlib.sha256(data).hexdigest(), str(path)


def _stored(store: LocalChunkStore) -> list:
    return [p for p in store.chunks.rglob("*") if p.is_file()]


def test_chunks_cover_blob_and_identical_chunks_are_stored_once(tmp_path):
    store = LocalChunkStore(tmp_path / "chunks")
    store.ensure_dirs()
    shared = os.urandom(3 * CS)
    da, pa = _blob(tmp_path, "a", shared + os.urandom(CS + 100))
    db, pb = _blob(tmp_path, "b", shared + os.urandom(2 * CS))
    ia, new_a = chunk_blob(store, da, pa, CS)
    ib, new_b = chunk_blob(store, db, pb, CS)
    assert ia["size"] == 4 * CS + 100 and len(ia["chunks"]) == 5 and new_a == 5
    assert ia["chunks"][:3] == ib["chunks"][:3]
    assert new_b == 2  # the 3 shared chunks were already there
    assert len(_stored(store)) == 7
    data = b"".join(store.chunk_path(d).read_bytes() for d in ia["chunks"])
    assert data == open(pa, "rb").read()
    assert store.get_index(da) == ia and store.get_index(db) == ib
    # Re-chunking is idempotent.
    assert chunk_blob(store, da, pa, CS)[1] == 0


def test_chunk_size_must_be_block_aligned_and_blob_must_match(tmp_path):
    store = LocalChunkStore(tmp_path / "chunks")
    d, p = _blob(tmp_path, "a", b"x" * 10)
    with pytest.raises(ValueError):
        chunk_blob(store, d, p, 1000)
    with pytest.raises(ValueError, match="does not match"):
        chunk_blob(store, "sha256:" + "0" * 64, p, CS)

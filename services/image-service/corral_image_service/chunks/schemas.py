from pydantic import BaseModel, Field


class ChunkIndexOut(BaseModel):
    digest: str = Field(description="sha256 of the whole blob")
    size: int
    chunk_size: int = Field(description="chunk i covers [i*chunk_size, min(size, (i+1)*chunk_size))")
    chunks: list[str] = Field(description="sha256 digests of the chunks, in order")

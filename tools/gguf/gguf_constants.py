"""GGUF v3 constants shared by the writer, the reader and the converter.

Values follow ggml.h (ggml_type ids), llama.h (llama_ftype) and gguf.h (value types).
Only numpy is needed.
"""

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_DEFAULT_ALIGNMENT = 32


class ValueType:
    """gguf_type: the type tag written before every metadata value."""
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct format character and byte size of each scalar value type
VALUE_STRUCT = {
    ValueType.UINT8: "<B", ValueType.INT8: "<b",
    ValueType.UINT16: "<H", ValueType.INT16: "<h",
    ValueType.UINT32: "<I", ValueType.INT32: "<i",
    ValueType.FLOAT32: "<f", ValueType.BOOL: "<?",
    ValueType.UINT64: "<Q", ValueType.INT64: "<q",
    ValueType.FLOAT64: "<d",
}


class GGMLType:
    """ggml_type ids as stored in a tensor info record."""
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


# (elements per block, bytes per block) for every type the reader can size
GGML_BLOCK = {
    GGMLType.F32: (1, 4), GGMLType.F16: (1, 2), GGMLType.BF16: (1, 2),
    GGMLType.F64: (1, 8), GGMLType.I8: (1, 1), GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4), GGMLType.I64: (1, 8),
    GGMLType.Q4_0: (32, 18), GGMLType.Q4_1: (32, 20),
    GGMLType.Q5_0: (32, 22), GGMLType.Q5_1: (32, 24),
    GGMLType.Q8_0: (32, 34), GGMLType.Q8_1: (32, 36),
    GGMLType.Q2_K: (256, 84), GGMLType.Q3_K: (256, 110),
    GGMLType.Q4_K: (256, 144), GGMLType.Q5_K: (256, 176),
    GGMLType.Q6_K: (256, 210), GGMLType.Q8_K: (256, 292),
    GGMLType.IQ2_XXS: (256, 66), GGMLType.IQ2_XS: (256, 74),
    GGMLType.IQ3_XXS: (256, 98), GGMLType.IQ1_S: (256, 50),
    GGMLType.IQ4_NL: (32, 18), GGMLType.IQ3_S: (256, 110),
    GGMLType.IQ2_S: (256, 82), GGMLType.IQ4_XS: (256, 136),
    GGMLType.IQ1_M: (256, 56), GGMLType.TQ1_0: (256, 54),
    GGMLType.TQ2_0: (256, 66), GGMLType.MXFP4: (32, 17),
}

GGML_TYPE_NAME = {v: k for k, v in vars(GGMLType).items() if not k.startswith("_")}


class FileType:
    """llama_ftype written as general.file_type."""
    ALL_F32 = 0
    MOSTLY_F16 = 1
    MOSTLY_Q4_0 = 2
    MOSTLY_Q8_0 = 7
    MOSTLY_BF16 = 32


class TokenType:
    """llama_token_type written in tokenizer.ggml.token_type."""
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


GGML_QUANT_VERSION = 2


def tensor_nbytes(ggml_type, ne):
    """Bytes of a tensor of type `ggml_type` with dims `ne` (innermost first)."""
    block_elems, block_bytes = GGML_BLOCK[ggml_type]
    n = 1
    for d in ne:
        n *= int(d)
    if ne and int(ne[0]) % block_elems != 0:
        raise ValueError(f"ne[0]={ne[0]} is not a multiple of the block size {block_elems} "
                         f"of type {GGML_TYPE_NAME.get(ggml_type, ggml_type)}")
    return n // block_elems * block_bytes


def align_up(n, alignment):
    return (n + alignment - 1) // alignment * alignment

"""The format codes and descriptors of the AMQP 1.0 type system (part 1, section 1.6; part 3).

Facts of the specification, nothing else: each constant is the constructor byte of one encoding.
"""

from __future__ import annotations

from typing import Final

DESCRIBED: Final = 0x00
NULL: Final = 0x40
TRUE: Final = 0x41
FALSE: Final = 0x42
UINT0: Final = 0x43
ULONG0: Final = 0x44
LIST0: Final = 0x45
UBYTE: Final = 0x50
BYTE: Final = 0x51
SMALLUINT: Final = 0x52
SMALLULONG: Final = 0x53
SMALLINT: Final = 0x54
SMALLLONG: Final = 0x55
BOOLEAN: Final = 0x56
USHORT: Final = 0x60
SHORT: Final = 0x61
UINT: Final = 0x70
INT: Final = 0x71
FLOAT: Final = 0x72
CHAR: Final = 0x73
DECIMAL32: Final = 0x74
ULONG: Final = 0x80
LONG: Final = 0x81
DOUBLE: Final = 0x82
TIMESTAMP: Final = 0x83
DECIMAL64: Final = 0x84
DECIMAL128: Final = 0x94
UUID: Final = 0x98
VBIN8: Final = 0xA0
STR8: Final = 0xA1
SYM8: Final = 0xA3
VBIN32: Final = 0xB0
STR32: Final = 0xB1
SYM32: Final = 0xB3
LIST8: Final = 0xC0
MAP8: Final = 0xC1
LIST32: Final = 0xD0
MAP32: Final = 0xD1
ARRAY8: Final = 0xE0
ARRAY32: Final = 0xF0

# Message sections (part 3, section 3.2), by numeric descriptor.
HEADER: Final = 0x70
DELIVERY_ANNOTATIONS: Final = 0x71
MESSAGE_ANNOTATIONS: Final = 0x72
PROPERTIES: Final = 0x73
APPLICATION_PROPERTIES: Final = 0x74
DATA: Final = 0x75
AMQP_SEQUENCE: Final = 0x76
AMQP_VALUE: Final = 0x77
FOOTER: Final = 0x78

# Transaction coordinator bodies (part 4).
DECLARE: Final = 0x31
DISCHARGE: Final = 0x32

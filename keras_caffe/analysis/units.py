"""The units ``analyze`` counts in."""

#: Bytes per value (float32).
BYTES_PER_VALUE = 4
#: 10 Gbit/s (commodity Ethernet), in bytes/s.
DEFAULT_BANDWIDTH = 10e9 / 8
#: A megabyte as FireCaffe's Table 1 counts it (10**6 bytes, not 2**20).
MB = 10**6

"""pcap / pcapng input and pcap output for ``vecroute replay``.

Reading lives in :mod:`vecroute.io.pcap_read`, writing in
:mod:`vecroute.io.pcap_write`; this module is the one place callers import from.
"""

from vecroute.io.pcap_read import MAX_CAPLEN, Capture, CaptureError, read_capture
from vecroute.io.pcap_write import PCAP_NANO_MAGIC, PcapWriter

__all__ = [
    "MAX_CAPLEN",
    "PCAP_NANO_MAGIC",
    "Capture",
    "CaptureError",
    "PcapWriter",
    "read_capture",
]

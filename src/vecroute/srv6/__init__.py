"""SRv6: SR policies (headend), local SIDs (endpoint), steering."""

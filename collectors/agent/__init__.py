"""The node agent: `python -m collectors.agent` (`make agent`) on every Ray node.

It reads this node's GPUs (NVML) and its Ray worker processes, spools what it read to
a bounded directory, sends it to raywatch over HTTP(S) with a node token, and carries
out the signals raywatch asks of this node. It holds no database or broker credentials
and imports no Django: stdlib, psutil and, where present, nvidia-ml-py.
The protocol is docs/agent-protocol.md.
"""

AGENT_VERSION = "0.1.0"

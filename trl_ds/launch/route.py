"""`python -m trl_ds.launch.route HOST`: this node's address on its route to HOST, the address the other nodes
reach it at. launch.sh gives it to torchrun's c10d rendezvous (--local_addr), which hands the address of the node
holding rank 0 to every rank; torchrun's own default, the host's FQDN, is often 'localhost' or a name the other nodes
cannot resolve."""
import socket
import sys


def source_address(host: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # UDP: only picks the route; nothing is sent
        return probe.getsockname()[0]


if __name__ == "__main__":
    try:
        print(source_address(sys.argv[1]))
    except OSError as err:
        sys.exit(f"trl_ds: no route from this node to the main node {sys.argv[1]} ({err}); set PET_LOCAL_ADDR to "
                 f"this node's address")

"""Labs spread over several servers with Mininet Cluster Edition (`mininet.examples.cluster`).

placement  which server runs each host, leaf and spine: Mininet Cluster placers, and the cables that cross
tunnel     a cable between servers: a VXLAN end per direction, VNIs derived from the layout
share      what one server builds (`Fabric(share=...)`)
server     one server's share process, spoken to one JSON line at a time (`mrclab cluster-server`)
servers    the runner's side: every server's share, here or over SSH, and `topo verify --servers`
"""

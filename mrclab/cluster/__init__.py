"""Labs spread over several servers with Mininet Cluster Edition (`mininet.examples.cluster`).

placement  which server runs each host, leaf and spine: Mininet Cluster placers, and the cables that cross
"""

"""Labs on another machine over SSH: `mrclab run --target`, `mrclab remote setup|fetch|clean`.

target: what `--target` names; ssh: one checked connection; job: a run there;
install: this version of mrclab, put there.
"""

"""os-ken controller apps, each run in its own process (eventlet stays there).

`process` starts one and waits for it; `base` holds what every app shares (layout,
stats file, flow-mod accounting); `static_srv6` installs the static uSID tables once.
"""

"""`aifs bench`: the same file workloads on several directories, compared side by side.

It uses only plain `os` calls on the paths, so it measures any mount (aifs or not)
exactly as a user's program would see it.
"""

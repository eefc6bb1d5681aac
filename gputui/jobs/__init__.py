"""The parent side of every torch job, torch-free: configs, the one event protocol, the one
child-process runner, the one results model, and each job's home, which its command and
the UI share. The jobs themselves run in :mod:`gputui.engine`, in a child process.
"""

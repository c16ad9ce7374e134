"""Why a job waits: the jobs no group can run, the reasons a group shows in its status, and
the core of the ``why`` command. Read after a pass; never a reason to create a runner."""

"""The Doctor screen (:mod:`.screen`): ``gputui doctor``'s report inside the monitor."""

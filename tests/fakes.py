"""Test doubles shared by the agent tests."""


class InboxSocket:
    """The receiving half of a fake non-blocking UDP socket: datagrams wait in `inbox`."""

    inbox: list

    def recvfrom(self, _size):
        if not self.inbox:
            raise BlockingIOError
        return self.inbox.pop(0)

    def close(self):
        pass

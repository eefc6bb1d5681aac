"""gputui: what compute is here, can PyTorch use it, and how much faster is it?"""

__version__ = "0.1.0"

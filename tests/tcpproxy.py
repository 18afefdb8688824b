"""A small TCP proxy on loopback, standing in for the proxy or virtual IP that MySQL/MariaDB
users put in front of their servers: :meth:`stop` closes the listening socket and every
relayed connection (a failover's cut), :meth:`start` listens again on the same port."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self.port = port
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.accepted = 0
        #: set: bytes are relayed; clear (:meth:`pause`): connections stay open but nothing
        #: passes, as on a congested or partitioned link (replica lag)
        self._flowing = threading.Event()
        self._flowing.set()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def start(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._spawn(self._accept, listener)
        return self

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._flowing.set()
        for thread in self._threads:
            thread.join(5)
        self._threads = [t for t in self._threads if t.is_alive()]

    def _spawn(self, fn: object, *args: object) -> None:
        thread = threading.Thread(target=fn, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            self.accepted += 1
            with self._lock:
                self._sockets |= {client, server}
            self._spawn(self._relay, client, server)

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        peer = {a: b, b: a}
        try:
            for sock in peer:
                sock.setblocking(False)
                sel.register(sock, selectors.EVENT_READ)
            while True:
                if not self._flowing.wait(0.2):
                    with self._lock:
                        if a not in self._sockets:
                            return
                    continue
                for key, _ in sel.select(timeout=0.2):
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(65536)
                    if not data:
                        return
                    peer[src].setblocking(True)
                    peer[src].sendall(data)
                    peer[src].setblocking(False)
                with self._lock:
                    if a not in self._sockets:
                        return
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            for sock in peer:
                with self._lock:
                    self._sockets.discard(sock)
                sock.close()

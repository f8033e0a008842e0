/* Batched UDP datagram I/O for the MRC datapath (mrclab/agent/batchio.py is the interface and its pure-Python
 * twin): sendmmsg with a destination per datagram, and recvmmsg into preallocated slots with each datagram's
 * source address and ECN codepoint (IPV6_TCLASS ancillary data). Python's socket module has neither call, so
 * without this module every datagram costs a system call and the interpreter's work around it.
 *
 * Errors keep the kernel's per-datagram meaning: send stops at the first datagram the kernel refuses and says
 * why (errno), so the caller queues it and what follows exactly as it would after a failed sendto; recv raises
 * OSError only when no datagram was read (recvmmsg keeps a later error on the socket for the next call).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#define BATCH 64 /* datagrams per system call */
#define ECN_MASK 3
#define ECN_CE 3

static PyObject *batch_address(PyObject *self, PyObject *args)
{
	const char *host;
	int port;
	struct sockaddr_in6 sa;

	if (!PyArg_ParseTuple(args, "si:address", &host, &port))
		return NULL;
	if (port < 0 || port > 65535) {
		PyErr_Format(PyExc_ValueError, "port %d out of range", port);
		return NULL;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sin6_family = AF_INET6;
	sa.sin6_port = htons((unsigned short)port);
	if (inet_pton(AF_INET6, host, &sa.sin6_addr) != 1) {
		PyErr_Format(PyExc_ValueError, "not an IPv6 address: %s", host);
		return NULL;
	}
	return PyBytes_FromStringAndSize((const char *)&sa, sizeof(sa));
}

/* send(batch, start=0) -> (sent, errno): batch[start:] is a list of (socket, address, datagram), each address made
 * by address(), sent in that order: each run of datagrams for one socket in sendmmsg calls of up to BATCH, until
 * all are sent (errno 0) or the kernel refuses one (its errno; the datagrams before it were sent). */
static PyObject *batch_send(PyObject *self, PyObject *args)
{
	PyObject *batch, *sock = NULL;
	Py_ssize_t start = 0, total, i;
	int fd = -1, err = 0, n = 0, k, sent;
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	Py_buffer views[BATCH];

	if (!PyArg_ParseTuple(args, "O!|n:send", &PyList_Type, &batch, &start))
		return NULL;
	total = PyList_GET_SIZE(batch);
	if (start < 0 || start > total) {
		PyErr_SetString(PyExc_IndexError, "start out of range");
		return NULL;
	}
	i = start;
	while (i < total) {
		n = 0;
		/* the run of datagrams from i on that go through one socket, at most BATCH of them */
		while (n < BATCH && i + n < total) {
			PyObject *item = PyList_GET_ITEM(batch, i + n), *addr;

			if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
				PyErr_SetString(PyExc_TypeError, "a batch holds (socket, address, datagram) triples");
				goto fail;
			}
			if (PyTuple_GET_ITEM(item, 0) != sock) {
				if (n)
					break; /* another socket: its run is the next call's */
				sock = PyTuple_GET_ITEM(item, 0);
				if ((fd = PyObject_AsFileDescriptor(sock)) < 0)
					goto fail;
			}
			addr = PyTuple_GET_ITEM(item, 1);
			if (!PyBytes_Check(addr) || PyBytes_GET_SIZE(addr) != sizeof(struct sockaddr_in6)) {
				PyErr_SetString(PyExc_TypeError, "an address is what address() returns");
				goto fail;
			}
			if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 2), &views[n], PyBUF_SIMPLE) < 0)
				goto fail;
			iov[n].iov_base = views[n].buf;
			iov[n].iov_len = (size_t)views[n].len;
			memset(&msgs[n], 0, sizeof(msgs[n]));
			msgs[n].msg_hdr.msg_name = PyBytes_AS_STRING(addr);
			msgs[n].msg_hdr.msg_namelen = sizeof(struct sockaddr_in6);
			msgs[n].msg_hdr.msg_iov = &iov[n];
			msgs[n].msg_hdr.msg_iovlen = 1;
			n++;
		}
		Py_BEGIN_ALLOW_THREADS
		sent = sendmmsg(fd, msgs, (unsigned int)n, 0);
		err = sent < 0 ? errno : 0;
		Py_END_ALLOW_THREADS
		for (k = 0; k < n; k++)
			PyBuffer_Release(&views[k]);
		if (sent < 0) {
			if (err == EINTR) {
				if (PyErr_CheckSignals() < 0)
					return NULL;
				err = 0;
				continue;
			}
			break;
		}
		i += sent; /* fewer than n: the next call tells why the next one was refused */
	}
	return Py_BuildValue("(ni)", i - start, err);
fail:
	while (n-- > 0)
		PyBuffer_Release(&views[n]);
	return NULL;
}

/* recv(sock, buffer, slot, count) -> [(size, source, ce)]: up to count datagrams, the i-th into
 * buffer[i * slot:(i + 1) * slot]; source is the sender's 16-byte IPv6 address, ce whether it arrived marked
 * Congestion Experienced. An empty list when none is waiting. */
static PyObject *batch_recv(PyObject *self, PyObject *args)
{
	PyObject *sock, *result = NULL;
	Py_buffer buf;
	Py_ssize_t slot;
	int fd, count, got, err = 0, i;
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	struct sockaddr_in6 names[BATCH];
	union {
		char bytes[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control[BATCH];

	if (!PyArg_ParseTuple(args, "Ow*ni:recv", &sock, &buf, &slot, &count))
		return NULL;
	if ((fd = PyObject_AsFileDescriptor(sock)) < 0)
		goto done;
	if (count < 1 || count > BATCH || slot < 1 || slot * count > buf.len) {
		PyErr_Format(PyExc_ValueError, "%d slots of %zd bytes do not fit the buffer (at most %d slots)", count,
			     slot, BATCH);
		goto done;
	}
	for (i = 0; i < count; i++) {
		iov[i].iov_base = (char *)buf.buf + i * slot;
		iov[i].iov_len = (size_t)slot;
		memset(&msgs[i], 0, sizeof(msgs[i]));
		msgs[i].msg_hdr.msg_name = &names[i];
		msgs[i].msg_hdr.msg_namelen = sizeof(names[i]);
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_control = control[i].bytes;
		msgs[i].msg_hdr.msg_controllen = sizeof(control[i].bytes);
	}
	for (;;) {
		Py_BEGIN_ALLOW_THREADS
		got = recvmmsg(fd, msgs, (unsigned int)count, 0, NULL);
		err = got < 0 ? errno : 0;
		Py_END_ALLOW_THREADS
		if (got >= 0 || err != EINTR)
			break;
		if (PyErr_CheckSignals() < 0)
			goto done;
	}
	if (got < 0) {
		if (err == EAGAIN || err == EWOULDBLOCK)
			result = PyList_New(0);
		else {
			errno = err;
			PyErr_SetFromErrno(PyExc_OSError);
		}
		goto done;
	}
	if (!(result = PyList_New(got)))
		goto done;
	for (i = 0; i < got; i++) {
		struct msghdr *h = &msgs[i].msg_hdr;
		struct cmsghdr *c;
		int ce = 0;
		PyObject *item;

		for (c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
			if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS &&
			    c->cmsg_len == CMSG_LEN(sizeof(int))) {
				int tclass;

				memcpy(&tclass, CMSG_DATA(c), sizeof(tclass));
				ce = (tclass & ECN_MASK) == ECN_CE;
				break;
			}
		}
		item = Py_BuildValue("(Iy#O)", msgs[i].msg_len, (const char *)&names[i].sin6_addr,
				     (Py_ssize_t)sizeof(names[i].sin6_addr), ce ? Py_True : Py_False);
		if (!item) {
			Py_CLEAR(result);
			goto done;
		}
		PyList_SET_ITEM(result, i, item);
	}
done:
	PyBuffer_Release(&buf);
	return result;
}

static PyMethodDef methods[] = {
	{"address", batch_address, METH_VARARGS, "address(host, port) -> the destination send() takes (a sockaddr_in6)"},
	{"send", batch_send, METH_VARARGS, "send([(socket, address, datagram)], start=0) -> (sent, errno) (sendmmsg)"},
	{"recv", batch_recv, METH_VARARGS, "recv(sock, buffer, slot, count) -> [(size, source, ce)] (recvmmsg)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batchio", NULL, -1, methods};

PyMODINIT_FUNC PyInit__batchio(void)
{
	PyObject *m = PyModule_Create(&module);

	if (m && PyModule_AddIntConstant(m, "BATCH", BATCH) < 0)
		Py_CLEAR(m);
	return m;
}

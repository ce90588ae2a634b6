"""Pickling tpu tensors (pickle, torch.save's legacy format).

Those paths write and read a storage's bytes with UntypedStorage._write_file and
_set_from_file, which wrap a non-CPU storage's data pointer with from_blob and
copy through that. A tpu data pointer is a handle, not host memory, so a tpu
storage is written from its CPU copy and read into a CPU storage that is then
copied to it: the same bytes and file format; map_location works as usual."""
import torch

_write_file = torch.UntypedStorage._write_file
_set_from_file = torch.UntypedStorage._set_from_file


def _write_file_via_cpu(self, f, is_real_file, save_size, element_size):
    if self.device.type == "tpu":
        self = self.cpu()
    return _write_file(self, f, is_real_file, save_size, element_size)


def _set_from_file_via_cpu(self, f, offset, is_real_file, element_size):
    if self.device.type != "tpu":
        return _set_from_file(self, f, offset, is_real_file, element_size)
    host = torch.UntypedStorage(self.nbytes())
    _set_from_file(host, f, offset, is_real_file, element_size)
    self.copy_(host)
    return self


def install():
    torch.UntypedStorage._write_file = _write_file_via_cpu
    torch.UntypedStorage._set_from_file = _set_from_file_via_cpu

# Finds LibTorch (DESIGN.md "Stack") in this order and says which one it used:
#   1. an explicit Torch_DIR, or a CMAKE_PREFIX_PATH that holds a TorchConfig.cmake;
#   2. the `torch` package of the python3 on PATH, when it imports (a site PyTorch module, a conda env, a venv);
#   3. Debian's libtorch-dev (the default find_package search).
# TorchConfig looks its libraries up with find_library, which searches the system directories before the
# LibTorch it belongs to: with Debian's libtorch-dev installed beside a pip torch, libc10.so would come from
# Debian. Putting the chosen LibTorch's lib/ first on CMAKE_LIBRARY_PATH keeps every library from one LibTorch.
set(_fedshard_torch_source "")
if(Torch_DIR)
  set(_fedshard_torch_source "Torch_DIR")
elseif(CMAKE_PREFIX_PATH)
  find_file(_fedshard_torch_config TorchConfig.cmake PATHS ${CMAKE_PREFIX_PATH}
            PATH_SUFFIXES Torch share/cmake/Torch NO_DEFAULT_PATH NO_CACHE)
  if(_fedshard_torch_config)
    get_filename_component(Torch_DIR ${_fedshard_torch_config} DIRECTORY)
    set(_fedshard_torch_source "CMAKE_PREFIX_PATH")
  endif()
endif()
if(NOT _fedshard_torch_source)
  find_program(_fedshard_python3 python3 NO_CACHE)
  if(_fedshard_python3)
    execute_process(COMMAND ${_fedshard_python3} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _fedshard_torch_cmake OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _fedshard_rc ERROR_QUIET)
    if(_fedshard_rc EQUAL 0 AND EXISTS "${_fedshard_torch_cmake}/Torch/TorchConfig.cmake")
      set(Torch_DIR "${_fedshard_torch_cmake}/Torch")
      set(_fedshard_torch_source "the torch module of ${_fedshard_python3}")
    endif()
  endif()
endif()
if(_fedshard_torch_source)
  get_filename_component(_fedshard_torch_root "${Torch_DIR}/../../.." ABSOLUTE)
  if(EXISTS "${_fedshard_torch_root}/lib")
    list(PREPEND CMAKE_LIBRARY_PATH "${_fedshard_torch_root}/lib")
  endif()
else()
  set(_fedshard_torch_source "the system's default search (Debian libtorch-dev)")
endif()

find_package(Torch REQUIRED)
message(STATUS "fedshard: LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}, found through ${_fedshard_torch_source}")

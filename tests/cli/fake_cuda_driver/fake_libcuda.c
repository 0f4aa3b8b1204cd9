/* A stand-in for the NVIDIA driver's libcuda.so.1 with none of its functions, for the CLI tests on machines
   without a GPU: it lets kiln past its driver check, so that the CUDA plugin itself is loaded (every symbol
   it takes from the kiln program resolved), and the CUDA runtime then finds no usable driver. */
int kiln_fake_cuda_driver;

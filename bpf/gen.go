package bpf

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb -type counter steer xdp.c

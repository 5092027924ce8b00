// Command gpu-device-plugin advertises fake NVIDIA GPUs to a kubelet through the real
// device-plugin gRPC API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), so that GPU
// scheduling and device assignment can be tested on a machine without GPUs.
//
// It behaves like the NVIDIA device plugin with the index device-ID strategy: devices
// "0".."N-1" of resource nvidia.com/gpu, and Allocate answers with NVIDIA_VISIBLE_DEVICES
// naming the devices the kubelet chose. The kubelet, not this plugin, guarantees that no
// device is given to two containers at once. When the kubelet restarts it deletes the
// plugin sockets; the plugin notices and registers again.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once; the fake devices never change health.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		for _, id := range container.DevicesIds {
			if !p.known(id) {
				return nil, fmt.Errorf("unknown device %q", id)
			}
		}
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(container.DevicesIds, ",")},
		})
	}
	return response, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *plugin) known(id string) bool {
	for _, device := range p.devices {
		if device.ID == id {
			return true
		}
	}
	return false
}

// serve listens on socket and registers resource with the kubelet at kubeletSocket.
func serve(p *plugin, dir, socket, resource string) (*grpc.Server, error) {
	path := filepath.Join(dir, socket)
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	listener, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(listener) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		server.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     socket,
		ResourceName: resource,
	})
	if err != nil {
		server.Stop()
		return nil, fmt.Errorf("register with the kubelet: %w", err)
	}
	return server, nil
}

func main() {
	count := flag.Int("count", 4, "number of fake devices")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	flag.Parse()

	p := &plugin{}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: strconv.Itoa(i), Health: pluginapi.Healthy})
	}
	socket := "tfjob-fake-gpu.sock"
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	var server *grpc.Server
	for {
		// The kubelet removes every plugin socket when it (re)starts: serve and
		// register whenever ours is missing.
		if _, err := os.Stat(filepath.Join(*dir, socket)); server == nil || err != nil {
			if server != nil {
				server.Stop()
				server = nil
			}
			var err error
			if server, err = serve(p, *dir, socket, *resource); err != nil {
				log.Printf("not registered yet: %v", err)
			} else {
				log.Printf("registered %d devices of %s with the kubelet", *count, *resource)
			}
		}
		select {
		case <-stop:
			if server != nil {
				server.Stop()
			}
			return
		case <-time.After(time.Second):
		}
	}
}
